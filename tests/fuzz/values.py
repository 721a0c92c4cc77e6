"""Hostile values and what the generator does with objects: the tables it draws from."""

INT_EXTREMES = ["-1", "0", "2**31", "2**32 + 1", "2**62", "2**63", "-2**63", "-2**63 - 1", "2**64", "10**30"]
NOT_INTS = ["1.5", "-0.5", "float('nan')", "float('inf')", "np.float32(2.5)", "'3'"]
FLOATS = ["float('nan')", "float('inf')", "-float('inf')", "0.0", "-1.0", "1e39", "-1e39", "1e-46", "2**63",
          "2**1000", "1j", "None"]
STRINGS = ["''", "'\\x00'", "'\\ud800'", "'x' * 100000", "3", "None", "b'cpu'", "'cuda:99'"]
BOOLS = ["2", "-1", "None", "'False'", "0.5", "np.bool_(True)", "[]", "np.array([True, False])"]
CALLABLES = ["lambda: None", "lambda a, b, c: None", "fuzz_raise", "3", "type",
             "lambda command_buffer: command_buffer.commit()",
             "lambda command_buffer: command_buffer.wait_until_completed()"]
LITERALS = ["None", "True", "0", "-1", "2**31", "2**63", "-2**63", "1.5", "float('nan')", "''", "'cpu'", "b'\\x00'",
            "[]", "()", "{}", "[None]", "(1, 2, 3, 4, 5, 6, 7)", "object()", "lambda *args, **kwargs: None",
            "fuzz_raise", "mpsx", "range(3)", "...", "np.float32(1.5)", "np.array(3)", "np.array([], np.float32)",
            "np.zeros(7)", "np.zeros((2, 3), np.int64)", "np.zeros(4, np.complex64)", "np.array([None, 1])",
            "np.zeros(4, [('a', 'f4')])", "np.zeros((1, 1, 1, 1, 1), np.float32)"]
DTYPES = ["float32", "float16", "uint8", "float64", "int32", "int64", "bool", "complex64"]
IMAGE_DTYPES = {"FLOAT32": "float32", "FLOAT16": "float16", "UINT8": "uint8"}

# Generic things to do with an object: name -> statement.
PROTOCOL = {"repr": "repr(obj)", "str": "str(obj)", "hash": "hash(obj)", "eq": "obj == obj", "ne": "obj != 3",
            "bool": "bool(obj)", "pickle": "pickle.loads(pickle.dumps(obj))", "copy": "copy.copy(obj)",
            "deepcopy": "copy.deepcopy(obj)", "asarray": "np.asarray(obj)", "memoryview": "memoryview(obj)",
            "len": "len(obj)", "iter": "list(iter(obj))", "dir": "dir(obj)", "with": "with obj:\n    pass",
            "weakref": "weakref.ref(obj)"}

# What a completed handler does: name -> body (its argument is command_buffer).
HANDLERS = {
    "commit another on the queue": "other = q.command_buffer()\nother.commit()\nother.wait_until_completed()",
    "commit another on a new queue": "other = dev.new_command_queue().command_buffer()\nother.commit()\n"
                                     "other.wait_until_completed()",
    "wait for itself": "command_buffer.wait_until_completed()",
    "commit itself": "command_buffer.commit()",
    "wait for the queue": "q.wait_until_idle()",
    "add a handler": "command_buffer.add_completed_handler(lambda command_buffer: None)",
    "read its state": "command_buffer.status, command_buffer.error, command_buffer.command_count, "
                      "repr(command_buffer)",
    "replay itself": "command_buffer.replay()",
    "raise": "fuzz_raise()",
    "encode on it": None,  # a valid call of a random class's method, on the completed command buffer
    "encode on a new one": None,  # the same on a new command buffer of the queue, committed
}

# Checkpoint mutations: name -> (the helper in TAMPERINGS that makes it, its variants: the helper's arguments
# after the place, and what it tampers with: the "file", a "pickle"'s arguments or "both" in turn).
MUTATIONS = {
    "references": ("tamper_references", [f"{n}, {r}" for n in (1000, 100000) for r in ("{'$tensor': '0'}",
                                                                                       "{'$ref': 1}")], "both"),
    "dtypes": ("tamper_header", [f"'dtype', {d!r}, {f}" for d in ("BF16", "F8_E4M3", "F8_E5M2", "I64", "BOOL", "U8",
                                                                   "F64", "F16", "I32", "X9", "")
                                 for f in (True, False)], "file"),
    "sizes": ("tamper_header", [f"'shape', {s}, {f}" for s in ("[0, 2**62]", "[2**31, 2**31]", "[-1]", "[]", "[2**64]",
                                                               "lambda shape: [n + 1 for n in shape]",
                                                               "lambda shape: shape[::-1]",
                                                               "lambda shape: [math.prod(shape)]",
                                                               "lambda shape: shape + [1]", "lambda shape: [0] + shape")
                                for f in (True, False)]
              + [f"'data_offsets', lambda o: {o}" for o in ("[o[0] + 2**20, o[1] + 2**20]", "[o[0], o[1] + 2**20]",
                                                            "[0, o[1] - o[0]]", "[o[1], o[0]]", "[o[0], 2**64 - 1]",
                                                            "[o[0], 2**70]", "[-1, o[1]]", "[o[0] + 1, o[1] + 1]",
                                                            "[o[0], o[0]]", "[o[0]]", "None")], "file"),
    "names": ("tamper_name", [f"'class', {n}" for n in ("'x' * 1000000", "'mpsx.' + 'x' * 1000000",
                                                        "'builtins:' + 'x' * 1000000", "'mpsx.NoSuchClass'",
                                                        "'mpsx.Device'", "'mpsx.Image'", "'mpsx.CNNConvolution'",
                                                        "'mpsx.MPSXError'", "'mpsx.persistence'", "'builtins:object'",
                                                        "'os:system'", "'mpsx.persistence:_Restorer'", "''", "None")]
              + [f"{k!r}, {n}" for k in ("tensor", "reference")
                 for n in ("'x' * 1000000", "''", "'__metadata__'", "'\\ud800'", "'1'")], "both"),
    "nesting": ("tamper_nesting", [f"{d}, {o!r}, {c!r}" for d in (200, 100000)
                                   for o, c in (("[", "]"), ('{"$tuple": [', "]}"), ('{"$dict": {"a": ', "}}"))],
                "both"),
    "values": ("tamper_value", ["-1", "2**70", "-2**70", "1e308", "float('nan')", "float('inf')", "'x'",
                                "'x' * 1000000", "None", "True", "[]", "{}"], "both"),
    "keys": ("tamper_key", [""], "both"),
    "truncation": ("tamper_truncate", [""], "file"),
    "arrays": ("tamper_array", [f"lambda a: {e}" for e in (
        "a.astype(np.float64)", "a.astype(np.int64)", "a.astype(bool)", "a.astype(np.uint8)", "a.astype(np.float16)",
        "a.astype(np.complex64)", "a.astype(object)", "a.astype('>f4')", "a.reshape(-1)", "a.reshape(-1)[:-1]",
        "a[..., None]", "a[::-1]", "a.T", "np.broadcast_to(a.reshape(-1)[:1], (2**30, 2**30))",
        "np.zeros((), a.dtype)", "a.tolist()", "None", "'x' * 1000000")], "pickle"),
}

# The parameters an alias case gives one of the call's sources.
DESTINATIONS = ("destination_image", "destination_images", "destination_gradient", "destination_gradients")

# Kinds of case and their share of the cases.
KINDS = {"call": 31, "construct": 12, "set": 11, "data_source": 9, "sizes": 8, "sequence": 8, "bare": 6,
         "checkpoint": 5, "alias": 4, "protocol": 3, "handler": 3}

# Data source members become one of these.
FORMS = ["returns", "is", "raises", "arity", "deleted"]

"""Crash-isolated fuzzing of every public mpsx class.

The errors contract (README.md, "Bad input"): bad input gets a clear
exception naming what was expected and what was given (TypeError, ValueError
or mpsx.ShapeError, IndexError, an mpsx.MPSXError, MemoryError), raised before
anything is enqueued; nothing is lost or corrupted; never a crash or a hang.
The fuzz test (tests/test_fuzz.py) drives every public class of mpsx with generated hostile
arguments, in child processes that the parent replaces after a crash or a
hang:

- the catalog (catalog.py): the public classes and functions (mpsx.__all__), their
  constructors, methods and properties, by introspection;
- the factories (tests/fuzz/factories.py): for each class, code making a
  valid instance and valid arguments for its methods; a probe runs each once
  and describes what it made (types, shapes, which properties are writable);
  a class with methods but no working factory fails the test by name;
- the generator (generator.py, its hostile values in values.py and the code
  a case runs first in snippets.py): case N of a seed is a short Python snippet, a copy-pasteable
  reproducer, that runs a factory and then makes one hostile call: a
  constructor or method with an argument replaced by a hostile value fitted
  to the valid one (wrong shapes, dtypes, layouts and devices, arrays that end
  at an unreadable page, states of other kernels, committed command buffers,
  overflowing ints, non-integral floats, ...); a hostile property set, then
  an encode; the factory with one of its sizes made hostile everywhere, then
  an encode; a member of an object made by cls.__new__(cls); a data source
  whose members misbehave; a completed handler calling back into the
  runtime; valid calls around commits; a valid object saved (or pickled),
  its file (or description and arrays) tampered with, then loaded: a tensor
  referenced 100,000 times, other dtypes, shapes and offsets, names of a
  megabyte, unknown classes, nesting 100,000 deep, hostile scalars, a key
  dropped, the file cut short; or a valid encode whose destination is one
  of its sources, a batch view one image off a source batch or an image
  over a source's memory. The cases of a kind go round its targets, each
  visit taking the target's next hostile variant;
- the child runner (child.py) runs a batch of cases, reporting each one's start and
  phase so that a crash or a hang is pinned on its case, then commits and
  waits for what each encoded, and judges what each raised;
- the parent loop (runner.py) runs the batches on every core, starts a new child after a
  crash or a hang (skipping the later cases of that target), collects the
  findings and (report.py) prunes each kind's shortest reproducer; driver.py
  puts a run together (fuzz()) and reads the command line (main()).

A finding: a crash (a signal, a sanitizer's report, or an exit status
without a Python exception), a hang, an exception mpsx raised other than those
above or without a message (from a call, a command buffer's error or a
callback; what the case's own code raises is no finding), bad input accepted
(a non-integral number where an int is expected), a call that raised after
it had encoded commands, or, by the stricter rule of loading, a failure of
mpsx.save, mpsx.load or unpickling other than an mpsx.MPSXError, or with a
message quoting more than about 200 characters of the file.

Knobs (config.py): MPSX_FUZZ_CASES (cases per device; the default takes about 75 s on
2 cores with the cpu device), MPSX_FUZZ_SEED, MPSX_FUZZ_TIMEOUT (seconds one
case may take). Long runs, the same code path:
    python tests/test_fuzz.py --cases 100000 --seed 7 [--device cpu] [--only CNNConvolution,Vector]
    python tests/test_fuzz.py --cases 25000 --first-case 50000 --seed 7 --time-limit 400   # a part of one
    python tests/test_fuzz.py --seed 7 --show 1234      # prints the reproducer of case 1234
"""

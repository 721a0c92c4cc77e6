"""MPSState's resource API on State: states made with buffers, lazily made resources, temporary states of a command
buffer, StateResourceList, labels; bad input."""

import numpy as np
import pytest

import mpsx


def test_a_state_of_buffer_sizes_makes_each_when_asked(device):
    resources = mpsx.StateResourceList.resource_list_with_buffer_sizes(16, 0, 8)
    resources.append_buffer(4)
    state = mpsx.State(device, resource_list=resources)
    assert state.resource_count == 4 and state.resource_size() == 28
    assert [state.buffer_size_at_index(i) for i in range(4)] == [16, 0, 8, 4]
    assert state.resource_at_index(2, allocate_memory=False) is None  # "deferred until it is needed"
    buffer = state.resource_at_index(2)
    assert isinstance(buffer, mpsx.Buffer) and buffer.length == 8 and buffer.device.name == device.name
    # Made once: asking again gives it without making another.
    assert state.resource_at_index(2, allocate_memory=False).length == 8
    assert state.resource.length == 16
    assert state.resource_type_at_index(0) == mpsx.StateResourceType.BUFFER
    assert state.resource_type_at_index(4) == mpsx.StateResourceType.NONE
    assert not state.is_temporary
    one = mpsx.State(device, buffer_size=12)
    assert one.resource_count == 1 and one.resource.length == 12
    empty = mpsx.State(device)
    assert empty.resource_count == 0 and empty.resource is None and empty.resource_size() == 0


def test_states_of_given_buffers_and_temporary_states(device, rng):
    values = rng.standard_normal(4).astype(np.float32)
    vector = mpsx.Vector.from_numpy(device, values)
    state = mpsx.State(resource=vector.buffer)
    assert state.resource_count == 1 and state.buffer_size_at_index(0) == 16
    np.testing.assert_array_equal(np.asarray(state.resource).view(np.float32).reshape(-1), values)  # the same memory
    both = mpsx.State(resources=[vector.buffer, mpsx.Vector(device, 2).buffer])
    assert both.resource_count == 2 and both.resource_size() == 24
    cb = device.command_queue.command_buffer()
    temporary = mpsx.State.temporary_state_with_command_buffer(cb, buffer_size=32)
    assert temporary.is_temporary and temporary.read_count == 1 and temporary.resource.length == 32
    assert mpsx.State.temporary_state_with_command_buffer(cb).resource_count == 0


def test_labels_and_descriptor_queries(device):
    state = mpsx.State(device, buffer_size=4)
    assert state.label is None
    state.label = "mine"
    assert state.label == "mine"
    with pytest.raises(TypeError):
        state.label = 3
    d = mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 2, 2, 4, 1)
    assert state.destination_image_descriptor_for_source_images([], [state], mpsx.CNNAdd(device), d) is d


def test_bad_input(device):
    with pytest.raises(TypeError):
        mpsx.State()  # neither a device nor resources
    with pytest.raises(TypeError):
        mpsx.State(device, buffer_size=4, resource_list=mpsx.StateResourceList())
    with pytest.raises(ValueError):
        mpsx.State(device, buffer_size=-1)
    with pytest.raises(TypeError):
        mpsx.State(device, resource_list=[4, 8])
    with pytest.raises(TypeError):
        mpsx.State(resources=[b"bytes"])
    with pytest.raises(ValueError):
        mpsx.State(resources=[])
    with pytest.raises(ValueError):
        mpsx.StateResourceList().append_buffer(-8)
    with pytest.raises(TypeError):
        mpsx.NNGradientState(device, buffer_size=4)  # a family's state comes from its kernel
    state = mpsx.State(device, buffer_size=4)
    for call in (lambda: state.buffer_size_at_index(1), lambda: state.resource_at_index(1),
                 lambda: state.resource_at_index(-1), lambda: state.buffer_size_at_index(-1)):
        with pytest.raises(ValueError):
            call()
    other = [d for d in mpsx.devices() if d.name != device.name]
    if other:
        with pytest.raises(mpsx.DeviceMismatchError):
            mpsx.State(resources=[mpsx.Vector(device, 1).buffer, mpsx.Vector(other[0], 1).buffer])
    blank = mpsx.State.__new__(mpsx.State)
    for name in ("resource_count", "resource", "label"):
        with pytest.raises(TypeError):
            getattr(blank, name)

"""_saved.py — what autograd's saved-tensor hooks of lct.torch share: the handle protocol, the unpack hook, and the
registries of live compressed parameters and of each thread's activation contexts."""
import threading
import weakref


class Handle:
    """What a pack hook returns in place of a tensor; unpack() gives the tensor back, bit for bit."""
    __slots__ = ()

    def unpack(self):
        raise NotImplementedError


def unpack(saved):
    return saved.unpack() if isinstance(saved, Handle) else saved


def storage_address(t):
    """The address where t's storage starts (views of one storage share it)."""
    return t.data_ptr() - t.storage_offset() * t.element_size()


_parameter_sets = weakref.WeakSet()  # the live CompressedParameters
_local = threading.local()


def register_parameters(params):
    _parameter_sets.add(params)


def parameter_handle(t):
    """A handle for t if it is (a view of) a parameter that a CompressedParameters holds, else None."""
    for params in list(_parameter_sets):
        handle = params.handle(t)
        if handle is not None:
            return handle
    return None


def activation_stack():
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack

# fragprobe's PyTorch hook, put on PYTHONPATH by `fragprobe run --torch-snapshot`.
#
# It makes PyTorch record its caching allocator's history and dump a memory snapshot at
# exit and on out-of-memory, without touching the user's code. Rules it keeps:
# - nothing happens in a Python process that never imports torch, and torch is never
#   imported by this file;
# - CUDA is never initialised by this file: recording is queued with torch.cuda._lazy_call,
#   so it starts when the program itself first uses CUDA (data-loader workers that never
#   touch CUDA get nothing);
# - any failure prints one line to stderr and leaves the program alone;
# - a sitecustomize that was on the path before this one still runs.
import os
import sys

_OUT = os.environ.get("FRAGPROBE_TORCH_SNAPSHOT_DIR")
_HOOK_DIR = os.path.dirname(os.path.abspath(__file__))


def _say(msg):
    try:
        sys.stderr.write("fragprobe: torch snapshot: %s\n" % msg)
    except Exception:
        pass


def _path(reason):
    return os.path.join(_OUT, "%d-%s.pickle" % (os.getpid(), reason))


def _dump(torch, reason):
    path = _path(reason)
    tmp = path + ".part"
    torch.cuda.memory._dump_snapshot(tmp)
    os.replace(tmp, path)


def _setup(torch):
    try:
        max_entries = int(os.environ.get("FRAGPROBE_TORCH_MAX_ENTRIES", "100000"))
    except ValueError:
        max_entries = 100000
    state = {"ooms": 0, "recording": False}

    def start():
        # Runs inside torch.cuda._lazy_init, when the program first uses CUDA. Attaching
        # the observer initialises CUDA in real torch, so it must not happen any earlier.
        try:
            torch.cuda.memory._record_memory_history(max_entries=max_entries)
            state["recording"] = True
        except Exception as e:  # an old torch, or no CUDA
            _say("cannot record the allocator history: %r" % (e,))
            return
        try:
            torch._C._cuda_attach_out_of_memory_observer(on_oom)
        except Exception as e:
            _say("cannot watch for out-of-memory: %r" % (e,))

    def on_oom(device, alloc, device_allocated, device_free):
        # Called by the allocator when it is about to raise OutOfMemoryError.
        state["ooms"] += 1
        if state["ooms"] > 3 or not state["recording"]:
            return
        try:
            _dump(torch, "oom%d" % state["ooms"])
        except Exception as e:
            _say("cannot dump the snapshot at OOM: %r" % (e,))

    def at_exit():
        if not state["recording"]:
            return
        try:
            _dump(torch, "exit")
        except Exception as e:
            _say("cannot dump the snapshot at exit: %r" % (e,))

    try:
        torch.cuda._lazy_call(start)
    except Exception as e:
        _say("this torch cannot be hooked: %r" % (e,))
        return
    import atexit

    atexit.register(at_exit)


class _Finder:
    """Runs _setup once, right after `import torch` finishes."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            return None
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_setup(module):
            exec_module(module)
            try:
                _setup(module)
            except Exception as e:
                _say("setup failed: %r" % (e,))

        try:
            loader.exec_module = exec_then_setup
        except Exception:
            return spec
        return spec


def _chain_previous_sitecustomize():
    # Run the sitecustomize this one shadows, if any (a virtualenv's or a distro's).
    import importlib.util

    me = sys.modules.get("sitecustomize")
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HOOK_DIR]
        del sys.modules["sitecustomize"]
        spec = importlib.util.find_spec("sitecustomize")
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = mod
            spec.loader.exec_module(mod)
    except Exception as e:
        _say("the previous sitecustomize failed: %r" % (e,))
    finally:
        sys.path[:] = saved
        if me is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = me


if _OUT and os.path.isdir(_OUT):
    if "torch" in sys.modules:
        _setup(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _Finder())
_chain_previous_sitecustomize()

# fragprobe's PyTorch hook, put on PYTHONPATH by `fragprobe run --torch-snapshot`.
#
# It makes PyTorch record its caching allocator's history and dump a memory snapshot at
# exit and on out-of-memory, without touching the user's code. Rules it keeps:
# - nothing happens in a Python process that never imports torch, and torch is never
#   imported by this file;
# - CUDA is never initialised by this file: recording is queued with torch.cuda._lazy_call,
#   so it starts when the program itself first uses CUDA (data-loader workers that never
#   touch CUDA get nothing);
# - a program that records its own history keeps its own settings;
# - Python stacks only by default (C++ unwinding on every allocation would slow the host);
# - a forked child does not dump its parent's state;
# - any failure prints one line to stderr and leaves the program alone;
# - a sitecustomize that was on the path before this one still runs, with sys.path as it
#   leaves it.
import os
import sys

_OUT = os.environ.get("FRAGPROBE_TORCH_SNAPSHOT_DIR")
_HOOK_DIR = os.path.dirname(os.path.abspath(__file__))


def _say(msg):
    try:
        sys.stderr.write("fragprobe: torch snapshot: %s\n" % msg)
    except Exception:
        pass


def _dump(torch, reason):
    path = os.path.join(_OUT, "%d-%s.pickle" % (os.getpid(), reason))
    tmp = path + ".part"
    torch.cuda.memory._dump_snapshot(tmp)
    os.replace(tmp, path)


def _setup(torch):
    if getattr(sys, "_fragprobe_torch_hooked", False):
        return  # a nested `fragprobe run --torch-snapshot`, or a second import path
    sys._fragprobe_torch_hooked = True
    try:
        max_entries = int(os.environ.get("FRAGPROBE_TORCH_MAX_ENTRIES", "100000"))
    except ValueError:
        max_entries = 100000
    stacks = os.environ.get("FRAGPROBE_TORCH_STACKS", "python")
    state = {"ooms": 0, "recording": False, "pid": os.getpid()}

    def mine():
        return state["recording"] and state["pid"] == os.getpid()

    def on_oom(device, alloc, device_allocated, device_free):
        # Called by the allocator (its lock released) before it raises OutOfMemoryError.
        state["ooms"] += 1
        if state["ooms"] > 3 or not mine():
            return
        try:
            _dump(torch, "oom%d" % state["ooms"])
        except Exception as e:
            _say("cannot dump the snapshot at OOM: %r" % (e,))

    def start():
        # Runs inside torch.cuda._lazy_init, when the program first uses CUDA. Attaching
        # the observer initialises CUDA in real torch, so it must not happen any earlier.
        try:
            enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
            if enabled is None or not enabled():
                torch.cuda.memory._record_memory_history(
                    max_entries=max_entries, stacks=stacks
                )
            state["recording"] = True
        except Exception as e:  # an old torch, or no CUDA
            _say("cannot record the allocator history: %r" % (e,))
            return
        try:
            torch._C._cuda_attach_out_of_memory_observer(on_oom)
        except Exception as e:
            _say("cannot watch for out-of-memory: %r" % (e,))

    def at_exit():
        if not mine():
            return
        try:
            _dump(torch, "exit")
        except Exception as e:
            _say("cannot dump the snapshot at exit: %r" % (e,))

    def in_child():
        state["recording"] = False

    try:
        torch.cuda._lazy_call(start)
    except Exception as e:
        _say("this torch cannot be hooked: %r" % (e,))
        return
    import atexit

    atexit.register(at_exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=in_child)


class _Finder:
    """Patches the loader of every spec found for `torch` until one import ran _setup.

    A `find_spec("torch")` probe (transformers, accelerate and lightning do one) gets a
    patched spec too; the finder leaves once torch itself has been executed.
    """

    busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or _Finder.busy:
            return None
        _Finder.busy = True
        try:
            import importlib.util

            spec = importlib.util.find_spec("torch")
        finally:
            _Finder.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module
        had_own = "exec_module" in getattr(loader, "__dict__", {})
        finder = self

        def exec_then_setup(module):
            try:
                if had_own:
                    loader.exec_module = original
                else:
                    del loader.exec_module
            except Exception:
                pass
            original(module)
            if getattr(module, "__name__", None) != "torch":
                return
            try:
                sys.meta_path.remove(finder)
            except ValueError:
                pass
            try:
                _setup(module)
            except Exception as e:
                _say("setup failed: %r" % (e,))

        try:
            loader.exec_module = exec_then_setup
        except Exception:
            pass
        return spec


def _same_dir(p):
    try:
        return os.path.samefile(p or ".", _HOOK_DIR)
    except OSError:
        return False


def _chain_previous_sitecustomize():
    # Run the sitecustomize this one shadows, if any (a virtualenv's or a distro's), and
    # keep whatever it does to sys.path.
    try:
        import importlib.machinery
        import importlib.util

        others = [p for p in sys.path if not _same_dir(p)]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
        if spec is None or spec.loader is None:
            return
        me = sys.modules.get("sitecustomize")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = mod
        try:
            spec.loader.exec_module(mod)
        finally:
            if me is not None:
                sys.modules["sitecustomize"] = me
    except Exception as e:
        _say("the previous sitecustomize failed: %r" % (e,))


if _OUT and os.path.isdir(_OUT):
    if "torch" in sys.modules:
        _setup(sys.modules["torch"])
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
_chain_previous_sitecustomize()

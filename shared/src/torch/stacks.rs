//! Interned stack frames and call stacks.
//!
//! A snapshot repeats the same frames (and often the same whole stacks) in every block and
//! trace entry; each distinct frame and each distinct stack is stored once and named by a
//! small id.

use std::sync::Arc;

use crate::model::hash::FxMap;

/// One Python or C++ stack entry: `{filename, line, name}` in the pickle.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Source file (`"??"` when PyTorch could not symbolise a C++ frame).
    pub filename: Arc<str>,
    /// Line number (0 when unknown).
    pub line: i64,
    /// Function name.
    pub name: Arc<str>,
}

/// Function names whose frames a viewer leaves out: PyTorch's own unwinder and capture, the
/// C start-up, CPython's call machinery. The same list as PyTorch's memory_viz
/// (`torch.cuda._memory_viz._frame_filter`), so both show the same stacks.
const HIDDEN_FUNCTIONS: [&str; 8] = [
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];
/// File names whose frames a viewer leaves out: the dispatcher's boxing and registration,
/// CPython's interpreter loop (memory_viz's list too).
const HIDDEN_FILES: [&str; 10] = [
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

impl Frame {
    /// Whether a viewer shows this frame: not one of PyTorch's unwinder, the C start-up or
    /// CPython's interpreter (the rule of PyTorch's memory_viz: a name or file name that
    /// contains one of its listed parts).
    pub fn is_shown(&self) -> bool {
        !HIDDEN_FUNCTIONS.iter().any(|h| self.name.contains(h))
            && !HIDDEN_FILES.iter().any(|h| self.filename.contains(h))
    }

    /// Whether this is a Python frame (the user's model code, usually).
    pub fn is_python(&self) -> bool {
        self.filename.ends_with(".py")
    }
}

/// Index of an interned frame.
pub type FrameId = u32;
/// Index of an interned stack; [`EMPTY_STACK`] is the stack with no frames.
pub type StackId = u32;
/// The stack with no frames (no context was recorded).
pub const EMPTY_STACK: StackId = 0;

/// The table of distinct frames and stacks of one snapshot.
#[derive(Clone, Debug)]
pub struct Stacks {
    frames: Vec<Frame>,
    frame_ids: FxMap<Frame, FrameId>,
    /// All stacks' frame ids, back to back; stack `i` is `flat[starts[i]..starts[i + 1]]`.
    flat: Vec<FrameId>,
    starts: Vec<u32>,
    stack_ids: FxMap<Box<[FrameId]>, StackId>,
}

impl Default for Stacks {
    fn default() -> Self {
        let mut stack_ids = FxMap::default();
        stack_ids.insert(Box::from([] as [FrameId; 0]), EMPTY_STACK);
        Stacks {
            frames: Vec::new(),
            frame_ids: FxMap::default(),
            flat: Vec::new(),
            starts: vec![0, 0],
            stack_ids,
        }
    }
}

impl Stacks {
    /// Interns one frame.
    pub fn frame(&mut self, f: Frame) -> FrameId {
        if let Some(&id) = self.frame_ids.get(&f) {
            return id;
        }
        let id = self.frames.len() as FrameId;
        self.frames.push(f.clone());
        self.frame_ids.insert(f, id);
        id
    }

    /// Interns a stack given innermost-first frame ids (the pickle's order).
    pub fn stack(&mut self, frames: &[FrameId]) -> StackId {
        if let Some(&id) = self.stack_ids.get(frames) {
            return id;
        }
        let id = (self.starts.len() - 1) as StackId;
        self.flat.extend_from_slice(frames);
        self.starts.push(self.flat.len() as u32);
        self.stack_ids.insert(frames.into(), id);
        id
    }

    /// The frame ids of stack `id`, innermost first.
    pub fn get(&self, id: StackId) -> &[FrameId] {
        let i = id as usize;
        match (self.starts.get(i), self.starts.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.flat[a as usize..b as usize],
            _ => &[],
        }
    }

    /// Frame `id`.
    pub fn frame_at(&self, id: FrameId) -> Option<&Frame> {
        self.frames.get(id as usize)
    }

    /// The frames of stack `id`, innermost first.
    pub fn frames(&self, id: StackId) -> impl Iterator<Item = &Frame> + '_ {
        self.get(id)
            .iter()
            .filter_map(|&f| self.frames.get(f as usize))
    }

    /// The frames of stack `id` a viewer shows ([`Frame::is_shown`]), innermost first.
    pub fn shown_frames(&self, id: StackId) -> impl Iterator<Item = &Frame> + '_ {
        self.frames(id).filter(|f| f.is_shown())
    }

    /// Number of distinct frames.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Number of distinct stacks (including the empty one).
    pub fn stack_count(&self) -> usize {
        self.starts.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(filename: &str, line: i64, name: &str) -> Frame {
        Frame {
            filename: filename.into(),
            line,
            name: name.into(),
        }
    }

    #[test]
    fn a_viewer_leaves_out_the_unwinder_and_the_interpreter_as_memory_viz_does() {
        let mut s = Stacks::default();
        let frames = [
            frame("??", 0, "torch::unwind::unwind()"),
            frame(
                "??",
                0,
                "torch::CapturedTraceback::gather(bool, bool, bool)",
            ),
            frame(
                "/pytorch/c10/cuda/CUDACachingAllocator.cpp",
                1321,
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
            ),
            frame(
                "/pytorch/aten/src/ATen/core/boxing/impl/make_boxed_from_unboxed_functor.h",
                485,
                "call",
            ),
            frame(
                "/usr/local/src/conda/python-3.11/Python/ceval.c",
                5305,
                "_PyEval_EvalFrameDefault",
            ),
            frame("/home/me/train.py", 42, "forward"),
            frame(
                "/usr/local/src/conda/python-3.11/Objects/call.c",
                92,
                "_PyObject_MakeTpCall",
            ),
            frame("/home/me/train.py", 80, "<module>"),
            frame("??", 0, "__libc_start_main"),
            frame("??", 0, "_start"),
        ];
        let ids: Vec<FrameId> = frames.iter().cloned().map(|f| s.frame(f)).collect();
        let st = s.stack(&ids);
        let shown: Vec<(&str, i64)> = s.shown_frames(st).map(|f| (&*f.filename, f.line)).collect();
        assert_eq!(
            shown,
            [
                ("/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1321),
                ("/home/me/train.py", 42),
                ("/home/me/train.py", 80)
            ]
        );
        assert_eq!(s.frames(st).count(), 10, "frames() still has them all");
        assert!(frames[5].is_python() && !frames[2].is_python());
    }
}

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

    /// Number of distinct frames.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Number of distinct stacks (including the empty one).
    pub fn stack_count(&self) -> usize {
        self.starts.len() - 1
    }
}

//! The calling thread's context stack (`cuCtxPushCurrent`/`PopCurrent`/`SetCurrent`).

use std::cell::RefCell;

thread_local! {
    static STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// The top of this thread's stack.
pub fn current() -> Option<u64> {
    STACK.with(|s| s.borrow().last().copied())
}

/// `cuCtxSetCurrent`: replaces the top (pushes onto an empty stack); 0 pops.
pub fn set_current(ctx: u64) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if ctx == 0 {
            s.pop();
        } else if let Some(top) = s.last_mut() {
            *top = ctx;
        } else {
            s.push(ctx);
        }
    })
}

pub fn push(ctx: u64) {
    STACK.with(|s| s.borrow_mut().push(ctx))
}

pub fn pop() -> Option<u64> {
    STACK.with(|s| s.borrow_mut().pop())
}

/// Removes `ctx` wherever it is on this thread's stack (the context was destroyed).
pub fn forget(ctx: u64) {
    STACK.with(|s| s.borrow_mut().retain(|&c| c != ctx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_semantics() {
        assert_eq!(current(), None);
        set_current(7);
        assert_eq!(current(), Some(7));
        push(8);
        assert_eq!(current(), Some(8));
        set_current(9);
        assert_eq!(pop(), Some(9));
        assert_eq!(current(), Some(7));
        set_current(0);
        assert_eq!(current(), None);
        set_current(0);
        assert_eq!(current(), None);
    }
}

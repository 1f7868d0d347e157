//! `cuGetProcAddress` lookups over the generated table.

use crate::table::{PROCS, SYMBOLS};
use std::ffi::c_void;

/// `CUdriverProcAddressQueryResult`.
pub const FOUND: i32 = 0;
pub const SYMBOL_NOT_FOUND: i32 = 1;
pub const VERSION_NOT_SUFFICIENT: i32 = 2;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub const PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// Resolves `name` as the real driver does: the entry with the highest version not above
/// `version`; its per-thread variant when `flags` asks for one and it exists.
pub fn resolve(name: &[u8], version: i32, flags: u64) -> Result<*const c_void, i32> {
    let start = PROCS.partition_point(|p| p.name.as_bytes() < name);
    let mut best = None;
    let mut known = false;
    for p in PROCS[start..]
        .iter()
        .take_while(|p| p.name.as_bytes() == name)
    {
        known = true;
        if version >= 0 && p.version <= version as u32 {
            best = Some(p);
        }
    }
    let p = match best {
        Some(p) => p,
        None if known => return Err(VERSION_NOT_SUFFICIENT),
        None => return Err(SYMBOL_NOT_FOUND),
    };
    let i = match p.per_thread {
        Some(pt) if flags == PER_THREAD_DEFAULT_STREAM => pt,
        _ => p.sym,
    };
    Ok(SYMBOLS[i].0)
}

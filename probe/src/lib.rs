//! `libfragprobe.so` — the injected probe.
//!
//! `LD_PRELOAD=libfragprobe.so CMD` makes every device allocation CMD performs visible to
//! fragprobe, whichever of the three doors into the driver it uses:
//!
//! 1. exported symbols with the driver's and runtime's names ([`table`] generates them),
//! 2. `dlsym` itself ([`dlsym`]), so `dlopen("libcuda.so.1")` + `dlsym` gets our wrappers,
//! 3. `cuGetProcAddress[_v2]` ([`getproc`]), mapping each returned pointer back to the
//!    exact symbol it is and handing out the wrapper of that symbol.
//!
//! All three lead to the one table in [`hooks`]. A hook does three things: guard, call the
//! real function, record ([`record`]). It never allocates, locks, panics or does I/O; the
//! only slow work is the one-time set-up on the first recorded event ([`state`]), which
//! creates the ring file ([`ringfile`]), clears out the rings of this user's processes that
//! are gone ([`sweep`]) and writes the process description ([`meta`]).
//! Any internal failure turns the probe off for the process: calls keep passing through.
//!
//! Nothing happens until the process records its first event: children that never touch
//! CUDA get no ring and no output. `FRAGPROBE_DISABLE=1` turns the probe off entirely.

#![allow(non_snake_case)]

pub mod clock;
pub mod device;
pub mod dlsym;
pub mod getproc;
pub mod handlers;
pub mod hooks;
pub mod meta;
pub mod record;
pub mod ringfile;
pub mod state;
pub mod sweep;
pub mod table;
pub mod thread;

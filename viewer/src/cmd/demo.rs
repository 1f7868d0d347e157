//! `fragprobe demo`: a PyTorch-like caching workload on the simulated GPU, under the probe,
//! that ends in an out-of-memory caused by fragmentation — recorded, reported, and shown
//! in the viewer when a display is available. Works on any machine, GPU or not.
//!
//! The workload is this same binary (`fragprobe __demo-workload`), which loads the
//! simulated `libcudart.so.12` like any CUDA program would and follows the caching
//! allocator's habits: small requests in 2 MiB segments, medium ones in 20 MiB segments,
//! large ones rounded to 2 MiB; segments are cached, and on a failed `cudaMalloc` the cache
//! is flushed and the call retried, as PyTorch does.

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::record::SessionOptions;

/// The simulated device the demo runs on.
pub const DEMO_GPU: &str = "1x4GiB";

/// Options of `fragprobe demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Where to write the trace.
    #[arg(short, long, value_name = "FILE", default_value = "fragprobe-demo.fpt")]
    pub output: PathBuf,
    /// Do not open the viewer even if a display is available.
    #[arg(long)]
    pub no_view: bool,
    /// Training iterations before the large request.
    #[arg(long, default_value_t = 6)]
    pub iterations: u32,
}

/// `fragprobe demo`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe()?;
    let opts = SessionOptions {
        command: vec![
            exe.into_os_string(),
            "__demo-workload".into(),
            args.iterations.to_string().into(),
        ],
        trace: Some(args.output.clone()),
        simulated_gpu: Some(Some(DEMO_GPU.to_string())),
        no_probe: false,
        env: vec![
            (
                "FRAGPROBE_LABEL".into(),
                "demo (native caching allocator)".into(),
            ),
            // A private simulated device: the demo never mixes with other simulated runs.
            (
                "FRAGPROBE_SIM_STATE".into(),
                std::env::temp_dir()
                    .join(format!("fragprobe-demo-{}.state", std::process::id()))
                    .into(),
            ),
        ],
    };
    let code = super::run::run_session(&opts, true, false, false)?;
    let state = std::env::temp_dir().join(format!("fragprobe-demo-{}.state", std::process::id()));
    let _ = std::fs::remove_file(state);
    let report = super::report::report_of(&args.output, true)?;
    print!("{}", crate::report::render(&report));
    let frag = report
        .failed_allocations
        .iter()
        .any(|f| f.verdict == "fragmentation");
    if frag {
        println!("\nThe demo's final cudaMalloc failed with FRAGMENTATION: the device had enough free memory in total, but no single hole was large enough.");
    }
    let display =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if display && !args.no_view {
        println!(
            "Opening the viewer: fragprobe view {}",
            args.output.display()
        );
        return crate::cmd::open_viewer(&args.output);
    }
    println!(
        "\nNext: fragprobe view {0}   ·   fragprobe export --format chrome {0} -o demo.json",
        args.output.display()
    );
    let _ = code;
    Ok(ExitCode::SUCCESS)
}

type Malloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void) -> c_int;

struct Cuda {
    malloc: Malloc,
    free: Free,
}

const MIB: usize = 1 << 20;

/// A toy caching allocator with PyTorch's segment rules.
struct Caching<'a> {
    cuda: &'a Cuda,
    /// Cached (free) segments: (size, ptr).
    cache: Vec<(usize, *mut c_void)>,
}

impl Caching<'_> {
    fn segment_size(req: usize) -> usize {
        if req <= MIB {
            2 * MIB
        } else if req < 10 * MIB {
            20 * MIB
        } else {
            req.div_ceil(2 * MIB) * 2 * MIB
        }
    }

    fn raw(&self, size: usize) -> Option<*mut c_void> {
        let mut p = std::ptr::null_mut();
        // SAFETY: cudaMalloc with a valid out-pointer.
        let r = unsafe { (self.cuda.malloc)(&mut p, size) };
        (r == 0).then_some(p)
    }

    fn malloc(&mut self, req: usize) -> Option<(usize, *mut c_void)> {
        let seg = Self::segment_size(req);
        if let Some(i) = self.cache.iter().position(|(s, _)| *s == seg) {
            return Some(self.cache.swap_remove(i));
        }
        if let Some(p) = self.raw(seg) {
            return Some((seg, p));
        }
        // Out of memory: free every cached segment and retry, as PyTorch does.
        self.empty_cache();
        self.raw(seg).map(|p| (seg, p))
    }

    fn free(&mut self, b: (usize, *mut c_void)) {
        self.cache.push(b);
    }

    fn empty_cache(&mut self) {
        for (_, p) in self.cache.drain(..) {
            // SAFETY: p came from cudaMalloc and is not in use.
            unsafe { (self.cuda.free)(p) };
        }
    }
}

/// The workload `fragprobe demo` runs under the probe (hidden subcommand).
pub fn workload(iterations: u32) -> anyhow::Result<ExitCode> {
    // SAFETY: loading the CUDA runtime (the simulated one under `fragprobe demo`).
    let lib = unsafe { libloading::Library::new("libcudart.so.12") }.map_err(|e| {
        anyhow::anyhow!("cannot load libcudart.so.12 ({e}); run this through `fragprobe demo`")
    })?;
    // SAFETY: the runtime's documented signatures.
    let cuda = unsafe {
        Cuda {
            malloc: *lib.get::<Malloc>(b"cudaMalloc\0")?,
            free: *lib.get::<Free>(b"cudaFree\0")?,
        }
    };
    let mut alloc = Caching {
        cuda: &cuda,
        cache: Vec::new(),
    };
    // Weights: persistent medium tensors, each in its own 20 MiB segment.
    let mut persistent: Vec<(usize, *mut c_void)> =
        (0..24).filter_map(|_| alloc.malloc(4 * MIB)).collect();
    // Training: the sequence length grows, so each iteration's activation is larger than
    // any cached segment and needs a new one; small gradient buckets reuse 2 MiB
    // segments; a slice of optimizer state stays after every iteration.
    for it in 0..iterations as usize {
        let act = alloc.malloc((400 + 10 * it) * MIB);
        let buckets: Vec<_> = (0..6).filter_map(|_| alloc.malloc(512 * 1024)).collect();
        persistent.extend(alloc.malloc(20 * MIB));
        for b in buckets {
            alloc.free(b);
        }
        if let Some(a) = act {
            alloc.free(a);
        }
    }
    // A long sequence arrives. The first cudaMalloc fails because the cache holds the old
    // activations; PyTorch frees the cache and retries — and the retry fails too: enough
    // memory is free in total, but the optimizer state is scattered across the device, so
    // no hole is large enough. That is fragmentation.
    let big = 1400 * MIB;
    match alloc.malloc(big) {
        Some(b) => alloc.free(b),
        None => eprintln!(
            "demo workload: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {} MiB",
            big / MIB
        ),
    }
    alloc.empty_cache();
    for (_, p) in persistent {
        // SAFETY: pointers from cudaMalloc, freed once.
        unsafe { (cuda.free)(p) };
    }
    Ok(ExitCode::SUCCESS)
}

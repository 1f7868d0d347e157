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

/// Where the demo's trace goes by default.
pub const DEFAULT_OUTPUT: &str = "fragprobe-demo.fpt";

/// Options of `fragprobe demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Where to write the trace.
    #[arg(short, long, value_name = "FILE", default_value = DEFAULT_OUTPUT)]
    pub output: PathBuf,
    /// Do not open the viewer even if a display is available.
    #[arg(long)]
    pub no_view: bool,
    /// Training iterations before the large request.
    #[arg(long, default_value_t = 6)]
    pub iterations: u32,
    /// The demo on real PyTorch (needs a Python that imports torch): a short PyTorch
    /// program that runs out of memory from fragmentation under the default allocator and
    /// fits with expandable_segments:True, on a simulated GPU; both runs recorded with
    /// PyTorch's own snapshots, reported and compared. `-o` then names a directory
    /// (default fragprobe-demo-torch).
    #[arg(long, conflicts_with = "iterations")]
    pub torch: bool,
    /// With `--torch`: the Python to run (default: a python3 beside fragprobe, as in a venv,
    /// else python3 on PATH).
    #[arg(long, value_name = "PATH", requires = "torch")]
    pub python: Option<PathBuf>,
}

/// `fragprobe demo`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if args.torch {
        let dir = if args.output == std::path::Path::new(DEFAULT_OUTPUT) {
            PathBuf::from("fragprobe-demo-torch")
        } else {
            args.output.clone()
        };
        return super::demo_torch::run(&dir, args.python.as_deref());
    }
    let exe = std::env::current_exe()?;
    let opts = SessionOptions {
        command: vec![
            exe.into_os_string(),
            "__demo-workload".into(),
            args.iterations.to_string().into(),
        ],
        trace: Some(args.output.clone()),
        simulated_gpu: Some(Some(DEMO_GPU.to_string())),
        torch_snapshot: None,
        nvml_interval: Some(crate::record::nvml::DEFAULT_INTERVAL),
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
    let mut text = crate::report::render(&report);
    let frag = report
        .failed_allocations
        .iter()
        .any(|f| f.verdict == "fragmentation");
    if frag {
        text += "\nThe demo's final cudaMalloc failed with FRAGMENTATION: the device had enough free memory in total, but no single hole was large enough.\n";
    }
    let display =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if display && !args.no_view {
        text += &format!(
            "Opening the viewer: fragprobe view {}\n",
            args.output.display()
        );
        crate::stdout::print(&text)?;
        return crate::cmd::open_viewer(&args.output);
    }
    text += &format!(
        "\nNext: fragprobe view {0}   ·   fragprobe export --format chrome {0} -o demo.json\n",
        args.output.display()
    );
    crate::stdout::print(&text)?;
    let _ = code;
    Ok(ExitCode::SUCCESS)
}

type Malloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void) -> c_int;
type Reserve = unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> c_int;
type AddressFree = unsafe extern "C" fn(u64, usize) -> c_int;
type Create = unsafe extern "C" fn(*mut u64, usize, *const AllocationProp, u64) -> c_int;
type Map = unsafe extern "C" fn(u64, usize, usize, u64, u64) -> c_int;
type SetAccess = unsafe extern "C" fn(u64, usize, *const AccessDesc, usize) -> c_int;
type Unmap = unsafe extern "C" fn(u64, usize) -> c_int;
type Release = unsafe extern "C" fn(u64) -> c_int;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Location {
    kind: c_int,
    id: c_int,
}

/// `CUmemAllocationProp` (CUDA 12 layout: type, handle types, location, win32 metadata,
/// allocFlags).
#[repr(C)]
struct AllocationProp {
    kind: c_int,
    handle_types: c_int,
    location: Location,
    win32_metadata: *mut c_void,
    alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc`.
#[repr(C)]
struct AccessDesc {
    location: Location,
    flags: c_int,
}

const CU_MEM_ALLOCATION_TYPE_PINNED: c_int = 1;
const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_int = 3;

struct Cuda {
    malloc: Malloc,
    free: Free,
}

/// The driver's virtual memory calls, for `expandable_segments:True`.
struct Vmm {
    reserve: Reserve,
    address_free: AddressFree,
    create: Create,
    map: Map,
    set_access: SetAccess,
    unmap: Unmap,
    release: Release,
    /// The one reservation every segment is mapped into.
    base: u64,
    span: usize,
    /// Free virtual ranges of the reservation: (offset, len), kept sorted and merged.
    holes: Vec<(usize, usize)>,
    /// Physical handle of each mapped offset.
    handles: Vec<(usize, u64)>,
}

impl Vmm {
    fn load(driver: &libloading::Library) -> anyhow::Result<Vmm> {
        // SAFETY: the driver API's documented signatures (cuda.h, CUDA 12).
        unsafe {
            Ok(Vmm {
                reserve: *driver.get::<Reserve>(b"cuMemAddressReserve\0")?,
                address_free: *driver.get::<AddressFree>(b"cuMemAddressFree\0")?,
                create: *driver.get::<Create>(b"cuMemCreate\0")?,
                map: *driver.get::<Map>(b"cuMemMap\0")?,
                set_access: *driver.get::<SetAccess>(b"cuMemSetAccess\0")?,
                unmap: *driver.get::<Unmap>(b"cuMemUnmap\0")?,
                release: *driver.get::<Release>(b"cuMemRelease\0")?,
                base: 0,
                span: 0,
                holes: Vec::new(),
                handles: Vec::new(),
            })
        }
    }

    /// Reserves twice the device's memory once, as PyTorch reserves generously up front.
    fn start(&mut self, device_bytes: usize) -> bool {
        let span = (2 * device_bytes).div_ceil(2 * MIB) * 2 * MIB;
        let mut va = 0u64;
        // SAFETY: valid out-pointer; alignment 0 and no fixed address.
        let r = unsafe { (self.reserve)(&mut va, span, 0, 0, 0) };
        if r != 0 {
            return false;
        }
        self.base = va;
        self.span = span;
        self.holes = vec![(0, span)];
        true
    }

    /// Maps `size` bytes of new physical memory at the first hole that fits.
    fn map_segment(&mut self, size: usize) -> Option<*mut c_void> {
        let i = self.holes.iter().position(|&(_, len)| len >= size)?;
        let (off, len) = self.holes[i];
        let loc = Location {
            kind: CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        };
        let prop = AllocationProp {
            kind: CU_MEM_ALLOCATION_TYPE_PINNED,
            handle_types: 0,
            location: loc,
            win32_metadata: std::ptr::null_mut(),
            alloc_flags: [0; 8],
        };
        let mut h = 0u64;
        // SAFETY: valid out-pointer and property struct.
        if unsafe { (self.create)(&mut h, size, &prop, 0) } != 0 {
            return None; // out of physical memory
        }
        let at = self.base + off as u64;
        let access = AccessDesc {
            location: loc,
            flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: `at..at+size` lies in our reservation and is unmapped; `h` is ours.
        let ok = unsafe {
            (self.map)(at, size, 0, h, 0) == 0 && (self.set_access)(at, size, &access, 1) == 0
        };
        if !ok {
            // SAFETY: `h` was created above and is not mapped.
            unsafe { (self.release)(h) };
            return None;
        }
        if len == size {
            self.holes.remove(i);
        } else {
            self.holes[i] = (off + size, len - size);
        }
        self.handles.push((off, h));
        Some(at as *mut c_void)
    }

    /// Unmaps a segment and gives its physical memory back.
    fn unmap_segment(&mut self, p: *mut c_void, size: usize) {
        let off = (p as u64 - self.base) as usize;
        if let Some(i) = self.handles.iter().position(|&(o, _)| o == off) {
            let (_, h) = self.handles.swap_remove(i);
            // SAFETY: the range was mapped by `map_segment` with handle `h`.
            unsafe {
                (self.unmap)(p as u64, size);
                (self.release)(h);
            }
        }
        self.holes.push((off, size));
        self.holes.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.holes.len());
        for &(o, l) in &self.holes {
            match merged.last_mut() {
                Some((po, pl)) if *po + *pl == o => *pl += l,
                _ => merged.push((o, l)),
            }
        }
        self.holes = merged;
    }

    fn finish(&mut self) {
        if self.span != 0 {
            // SAFETY: the reservation made in `start`, with every mapping gone.
            unsafe { (self.address_free)(self.base, self.span) };
            self.span = 0;
        }
    }
}

const MIB: usize = 1 << 20;

/// A toy caching allocator with PyTorch's segment rules; with `expandable_segments:True`
/// in `PYTORCH_CUDA_ALLOC_CONF` its segments are mapped pages of one reservation
/// (`cuMemCreate` + `cuMemMap`) that are unmapped when the cache is emptied, so physical
/// memory is never stranded by where the virtual holes are.
struct Caching<'a> {
    cuda: &'a Cuda,
    vmm: Option<Vmm>,
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

    fn raw(&mut self, size: usize) -> Option<*mut c_void> {
        if let Some(v) = &mut self.vmm {
            return v.map_segment(size);
        }
        let mut p = std::ptr::null_mut();
        // SAFETY: cudaMalloc with a valid out-pointer.
        let r = unsafe { (self.cuda.malloc)(&mut p, size) };
        (r == 0).then_some(p)
    }

    fn raw_free(&mut self, size: usize, p: *mut c_void) {
        if let Some(v) = &mut self.vmm {
            v.unmap_segment(p, size);
        } else {
            // SAFETY: p came from cudaMalloc and is not in use.
            unsafe { (self.cuda.free)(p) };
        }
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
        for (size, p) in std::mem::take(&mut self.cache) {
            self.raw_free(size, p);
        }
    }
}

/// Whether the run asked for expandable segments (PyTorch's own parser rules).
fn expandable_requested() -> bool {
    let conf = ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_default();
    fragprobe_shared::torch::sim::Config::parse(
        &conf,
        fragprobe_shared::torch::sim::Version::DEFAULT,
    )
    .is_ok_and(|c| c.expandable_segments)
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
    type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;
    // SAFETY: documented signature; cudaFree(NULL) initialises the primary context.
    let (free_b, total_b) = unsafe {
        (cuda.free)(std::ptr::null_mut());
        let info = *lib.get::<MemGetInfo>(b"cudaMemGetInfo\0")?;
        let (mut f, mut t) = (0usize, 0usize);
        info(&mut f, &mut t);
        (f, t)
    };
    let _ = free_b;
    let mut vmm = None;
    // The driver library stays loaded until the workload returns.
    let driver;
    if expandable_requested() {
        // SAFETY: loading the CUDA driver (the simulated one under `fragprobe demo`).
        driver = unsafe { libloading::Library::new("libcuda.so.1") }
            .map_err(|e| anyhow::anyhow!("cannot load libcuda.so.1 ({e})"))?;
        let mut v = Vmm::load(&driver)?;
        anyhow::ensure!(
            v.start(total_b),
            "cuMemAddressReserve failed: expandable segments unavailable"
        );
        vmm = Some(v);
    }
    let mut alloc = Caching {
        cuda: &cuda,
        vmm,
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
    for (size, p) in persistent {
        alloc.raw_free(size, p);
    }
    if let Some(v) = &mut alloc.vmm {
        v.finish();
    }
    Ok(ExitCode::SUCCESS)
}

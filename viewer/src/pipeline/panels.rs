//! What the panels draw, as plain data: the pipeline builds these from the model (see
//! [`super::view`]) and the GUI only draws them, so the dependency points one way,
//! `gui → pipeline`.

/// Inputs of the timeline panel.
pub mod timeline {
    use egui::Color32;

    /// One curve, already downsampled (min/max per pixel column, so peaks survive).
    #[derive(Clone, Debug, PartialEq)]
    pub struct Curve {
        /// Legend name.
        pub name: String,
        /// Line colour.
        pub colour: Color32,
        /// `[seconds since start, value]`, in time order.
        pub points: Vec<[f64; 2]>,
        /// Drawn dashed (reference lines).
        pub dashed: bool,
    }

    /// A moment to mark (a failed allocation, an OOM).
    #[derive(Clone, Debug, PartialEq)]
    pub struct Marker {
        /// Seconds since start.
        pub t: f64,
        /// Hover text.
        pub text: String,
    }

    /// What the timeline draws this frame.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Input {
        /// Curves in bytes.
        pub bytes: Vec<Curve>,
        /// Curves in 0..=1 (fragmentation ratio).
        pub ratio: Vec<Curve>,
        /// Failures.
        pub markers: Vec<Marker>,
        /// The device's total bytes (draws the total and the threshold line).
        pub device_total: Option<f64>,
        /// The run's time span in seconds.
        pub span: (f64, f64),
    }
}

/// Inputs of the figures panel.
pub mod figures {
    use crate::pipeline::crosscheck::CrossCheck;

    /// The numbers shown, copied out of the model.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Figures {
        /// Device memory live (plain, pitch, pool, VMM handles).
        pub live_bytes: u64,
        /// Objects counted in `live_bytes`.
        pub live_count: u64,
        /// Highest `live_bytes` so far.
        pub peak_live: u64,
        /// Managed memory live.
        pub managed_bytes: u64,
        /// VMM bytes mapped.
        pub mapped_bytes: u64,
        /// VMM address space reserved.
        pub reserved_bytes: u64,
        /// The arena's largest free block (`None`: no arena yet).
        pub largest_free: Option<u64>,
        /// The arena's free bytes.
        pub total_free: Option<u64>,
        /// `1 − largest_free / total_free`.
        pub frag_ratio: f64,
        /// Events lost in the ring (the producer reported them).
        pub dropped: u64,
        /// Anomalies the model counted (double frees, unknown frees...).
        pub anomalies: u64,
        /// Failed allocation calls.
        pub failed_allocs: u64,
        /// Events applied.
        pub events: u64,
        /// The NVML cross-check, when NVML figures exist for this space.
        pub crosscheck: Option<CrossCheck>,
        /// For a PyTorch snapshot: its allocator layer on this device. The device layer
        /// above is then PyTorch's segments (reserved memory), and the free space that
        /// matters is inside them, not between them.
        pub allocator: Option<AllocatorHeadline>,
    }

    /// The caching allocator's headline figures on one device (a snapshot's dump).
    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    pub struct AllocatorHeadline {
        /// Bytes of blocks handed out (`memory_allocated`).
        pub allocated: u64,
        /// Free bytes inside the segments (reserved but unallocated).
        pub free: u64,
        /// Largest free block inside the segments.
        pub largest_free: u64,
    }
}

/// Inputs of the compare panel.
pub mod compare {
    /// A run's figures over its whole length.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Stats {
        /// Highest live bytes.
        pub peak_live: u64,
        /// Fragmentation ratio when live bytes peaked.
        pub ratio_at_peak: f64,
        /// Highest fragmentation ratio.
        pub max_ratio: f64,
        /// Largest free block when live bytes peaked.
        pub largest_free_at_peak: Option<u64>,
        /// Smallest largest free block.
        pub min_largest_free: Option<u64>,
        /// Live bytes at the end (at process exit when it exited).
        pub final_live: u64,
        /// Failed allocation calls.
        pub failed_allocs: u64,
        /// Events lost.
        pub dropped: u64,
        /// Anomalies.
        pub anomalies: u64,
        /// Events.
        pub events: u64,
        /// Seconds from first to last record.
        pub duration_s: f64,
    }

    /// One run's summary.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Run {
        /// What the run is called: its `PYTORCH_CUDA_ALLOC_CONF` (or label), else its file name.
        pub label: String,
        /// The file (or "live").
        pub file: String,
        /// Figures over the whole run.
        pub stats: Stats,
        /// Live bytes over time: `[seconds since the run's first allocation, bytes]`.
        pub live: Vec<[f64; 2]>,
        /// Fragmentation ratio over time.
        pub ratio: Vec<[f64; 2]>,
        /// Whether the run is still loading.
        pub loading: bool,
        /// Allocator-level figures `(label, value)` of a PyTorch snapshot (empty otherwise).
        pub allocator: Vec<(String, String)>,
    }
}

/// Inputs of the processes panel.
pub mod processes {
    /// One process on one GPU.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct Row {
        /// GPU index.
        pub gpu: u32,
        /// Process id.
        pub pid: u32,
        /// NVML's used bytes (`None`: n/a).
        pub used: Option<u64>,
        /// Owner ("?" when unknown).
        pub user: String,
        /// Command line.
        pub command: String,
        /// Whether fragprobe's probe runs inside it.
        pub probed: bool,
        /// Bytes the probe tracks live, when probed.
        pub tracked: Option<u64>,
        /// "C" compute, "G" graphics, "C+G".
        pub kind: String,
    }

    /// What the panel shows.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct Input {
        /// Rows, any order (the panel sorts by GPU, then used bytes).
        pub rows: Vec<Row>,
        /// Why there are no NVML rows, if so.
        pub unavailable: Option<String>,
    }
}

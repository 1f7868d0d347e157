//! Processes: what `ProcessStart`'s metadata says, exit, loss and resync state.

use crate::format::{MetaEntry, Record};

use super::region::When;
use super::vmm::Vmm;

/// What a process told about itself (`ProcessInfo` metadata).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Parent pid (from `ProcessStart.aux`).
    pub ppid: Option<u32>,
    /// The command line, one entry per argument.
    pub cmdline: Vec<String>,
    /// The executable path.
    pub exe: Option<String>,
    /// The host name.
    pub hostname: Option<String>,
    /// The working directory.
    pub cwd: Option<String>,
    /// Wall-clock start time, ns since the Unix epoch.
    pub start_unix_ns: Option<u64>,
    /// `PYTORCH_CUDA_ALLOC_CONF`.
    pub alloc_conf: Option<String>,
    /// `CUDA_VISIBLE_DEVICES`.
    pub cuda_visible_devices: Option<String>,
    /// `RANK`.
    pub rank: Option<u64>,
    /// `LOCAL_RANK`.
    pub local_rank: Option<u64>,
    /// `WORLD_SIZE`.
    pub world_size: Option<u64>,
    /// `LOCAL_WORLD_SIZE`.
    pub local_world_size: Option<u64>,
    /// `FRAGPROBE_LABEL`.
    pub label: Option<String>,
    /// Every field as it was stored (lossy UTF-8), in order.
    pub fields: Vec<(String, String)>,
}

impl ProcessInfo {
    /// Reads a `ProcessInfo` metadata entry.
    pub fn from_meta(e: &MetaEntry<'_>) -> ProcessInfo {
        let fields = e
            .fields
            .clone()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect();
        ProcessInfo::from_fields(fields)
    }

    /// Builds the info from `(key, value)` fields.
    pub fn from_fields(fields: Vec<(String, String)>) -> ProcessInfo {
        let get = |k: &str| {
            fields
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let num = |k: &str| get(k).and_then(|v| v.trim().parse::<u64>().ok());
        ProcessInfo {
            ppid: num("ppid").and_then(|v| u32::try_from(v).ok()),
            cmdline: get("cmdline")
                .map(|c| {
                    c.trim_end_matches('\0')
                        .split('\0')
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
            exe: get("exe"),
            hostname: get("hostname"),
            cwd: get("cwd"),
            start_unix_ns: num("start_unix_ns"),
            alloc_conf: get("PYTORCH_CUDA_ALLOC_CONF"),
            cuda_visible_devices: get("CUDA_VISIBLE_DEVICES"),
            rank: num("RANK"),
            local_rank: num("LOCAL_RANK"),
            world_size: num("WORLD_SIZE"),
            local_world_size: num("LOCAL_WORLD_SIZE"),
            label: get("FRAGPROBE_LABEL"),
            fields,
        }
    }
}

/// How a process ended (`ProcessExit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    /// When.
    pub at: When,
    /// Exit status (`aux2`).
    pub status: u64,
    /// Live bytes the probe's own table still held (`size`).
    pub reported_live_bytes: u64,
    /// Live objects the probe's own table still held (`aux`).
    pub reported_live_count: u64,
}

/// Resync bookkeeping of one process.
#[derive(Clone, Debug, Default)]
pub(crate) struct ResyncState {
    /// Entries collected since `ResyncBegin` (applied at `ResyncEnd`).
    pub pending: Option<Vec<Record>>,
    /// `ResyncBegin.aux`: the watermark.
    pub begin: u64,
    /// `[begin, end)` of the last completed resync.
    pub window: Option<(u64, u64)>,
}

/// One process.
#[derive(Clone, Debug)]
pub struct Process {
    pub(crate) pid: u32,
    pub(crate) info: ProcessInfo,
    pub(crate) start: Option<When>,
    pub(crate) exit: Option<ExitInfo>,
    pub(crate) incomplete: bool,
    pub(crate) lost_events: u64,
    pub(crate) resyncs: u64,
    /// `(ordinal, space index)`.
    pub(crate) spaces: Vec<(i16, u32)>,
    pub(crate) vmm: Vmm,
    pub(crate) resync: ResyncState,
    /// `(ordinal, uuid)` learnt from this process's `Device` records.
    pub(crate) dev_uuids: Vec<(i16, String)>,
    /// `ProcessStart.meta`, to match a later [`Model::apply_meta`](super::Model::apply_meta).
    pub(crate) meta_ref: u64,
    /// `(meta ref, ordinal)` of `Device` records whose metadata was not given yet.
    pub(crate) pending_dev_meta: Vec<(u64, i16)>,
}

impl Process {
    pub(crate) fn new(pid: u32) -> Process {
        Process {
            pid,
            info: ProcessInfo::default(),
            start: None,
            exit: None,
            incomplete: false,
            lost_events: 0,
            resyncs: 0,
            spaces: Vec::new(),
            vmm: Vmm::default(),
            resync: ResyncState::default(),
            dev_uuids: Vec::new(),
            meta_ref: 0,
            pending_dev_meta: Vec::new(),
        }
    }

    /// The pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }
    /// What the process told about itself.
    pub fn info(&self) -> &ProcessInfo {
        &self.info
    }
    /// When `ProcessStart` was seen.
    pub fn start(&self) -> Option<When> {
        self.start
    }
    /// How it exited, if it did.
    pub fn exit(&self) -> Option<&ExitInfo> {
        self.exit.as_ref()
    }
    /// Whether events were lost since the last resync: the model may be wrong for it.
    pub fn incomplete(&self) -> bool {
        self.incomplete
    }
    /// Events lost in total.
    pub fn lost_events(&self) -> u64 {
        self.lost_events
    }
    /// Completed resyncs.
    pub fn resyncs(&self) -> u64 {
        self.resyncs
    }
    /// The spaces of this process: `(ordinal, id)`.
    pub fn spaces(&self) -> impl Iterator<Item = (i16, super::SpaceId)> + '_ {
        self.spaces.iter().map(|(o, s)| (*o, super::SpaceId(*s)))
    }
    /// The GPU uuid this process's ordinal maps to, when its `Device` record said.
    pub fn device_uuid(&self, ordinal: i16) -> Option<&str> {
        self.dev_uuids
            .iter()
            .find(|(o, _)| *o == ordinal)
            .map(|(_, u)| u.as_str())
    }
}

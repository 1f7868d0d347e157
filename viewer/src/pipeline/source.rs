//! Where a run's records come from. Live, replayed, imported and compared runs are all one
//! of these, ingested the same way into the same model.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use fragprobe_shared::trace::TRACE_MAGIC;

use super::feed::FeedReceiver;

/// Probed processes to follow live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveTarget {
    /// The ring directory to watch.
    pub dir: PathBuf,
    /// Only this process (`None`: every ring that appears).
    pub pid: Option<u32>,
}

/// A source of records.
pub enum Source {
    /// A trace file (replayed; may still be growing: it is then followed).
    Trace(PathBuf),
    /// Rings of probed processes, drained by the viewer itself.
    Live(LiveTarget),
    /// A PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`), imported.
    Snapshot(PathBuf),
    /// Records pushed by another part of the program (`run --view`, `attach --view`).
    Feed(FeedReceiver),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Trace(p) => write!(f, "Trace({})", p.display()),
            Source::Live(t) => write!(f, "Live({:?})", t),
            Source::Snapshot(p) => write!(f, "Snapshot({})", p.display()),
            Source::Feed(r) => write!(f, "Feed({})", r.name()),
        }
    }
}

impl Source {
    /// A file given on the command line or dropped on the window: a trace when it starts
    /// with the trace magic, else a PyTorch snapshot. Errors name the file.
    pub fn detect(path: &Path) -> Result<Source, String> {
        let mut head = [0u8; 16];
        let n = std::fs::File::open(path)
            .and_then(|mut f| f.read(&mut head))
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        if n >= 15 && head[..15] == TRACE_MAGIC[..15] {
            Ok(Source::Trace(path.to_path_buf()))
        } else if n == 0 {
            Err(format!(
                "{} is empty: not a fragprobe trace or PyTorch snapshot",
                path.display()
            ))
        } else {
            Ok(Source::Snapshot(path.to_path_buf()))
        }
    }

    /// A short name: the file name, or "live".
    pub fn name(&self) -> String {
        let file = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string())
        };
        match self {
            Source::Trace(p) | Source::Snapshot(p) => file(p),
            Source::Live(t) => match t.pid {
                Some(pid) => format!("live pid {pid}"),
                None => "live".to_string(),
            },
            Source::Feed(r) => r.name().to_string(),
        }
    }
}

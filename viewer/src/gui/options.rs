//! Everything the viewer remembers between sessions (eframe persistence, serde).

use std::path::PathBuf;

use super::{events, map, timeline};

/// Key under which the options are stored.
pub const STORAGE_KEY: &str = "fragprobe-viewer-options";

/// The main views.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Tab {
    /// Address-space map with the timeline under it.
    #[default]
    Map,
    /// The timelines, full height.
    Timeline,
    /// The events list.
    Events,
    /// NVML processes.
    Processes,
    /// Runs side by side.
    Compare,
    /// The allocator layer of a PyTorch snapshot: segments and their blocks.
    Blocks,
}

impl Tab {
    /// Every tab in shortcut order.
    pub const ALL: [Tab; 6] = [
        Tab::Map,
        Tab::Timeline,
        Tab::Events,
        Tab::Processes,
        Tab::Compare,
        Tab::Blocks,
    ];
    /// Label.
    pub fn name(self) -> &'static str {
        match self {
            Tab::Map => "Map",
            Tab::Timeline => "Timeline",
            Tab::Events => "Events",
            Tab::Processes => "Processes",
            Tab::Compare => "Compare",
            Tab::Blocks => "Blocks",
        }
    }
    /// Parses `--panel NAME` (`figures` selects the map with the figures shown).
    pub fn parse(name: &str) -> Result<(Tab, bool), String> {
        match name.to_ascii_lowercase().as_str() {
            "map" => Ok((Tab::Map, false)),
            "figures" => Ok((Tab::Map, true)),
            "timeline" | "timelines" => Ok((Tab::Timeline, false)),
            "events" => Ok((Tab::Events, false)),
            "processes" => Ok((Tab::Processes, false)),
            "compare" => Ok((Tab::Compare, false)),
            "blocks" => Ok((Tab::Blocks, false)),
            other => Err(format!(
                "unknown panel {other:?}: use map, timeline, figures, events, processes, compare or blocks"
            )),
        }
    }
}

/// The remembered layout and settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Options {
    /// The view shown.
    pub tab: Tab,
    /// Figures side panel shown.
    pub show_figures: bool,
    /// Timeline under the map shown.
    pub show_timeline: bool,
    /// Map settings.
    pub map: map::Options,
    /// Timeline settings.
    pub timeline: timeline::Options,
    /// The events filter.
    pub events: events::Filter,
    /// Replay speed (trace seconds per wall second).
    pub replay_speed: f64,
    /// Several live processes: one tab each (false) or merged per device (true).
    pub merge_processes: bool,
    /// Files opened recently (newest first).
    pub recent: Vec<PathBuf>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            tab: Tab::Map,
            show_figures: true,
            show_timeline: true,
            map: map::Options::default(),
            timeline: timeline::Options::default(),
            events: events::Filter::default(),
            replay_speed: 1.0,
            merge_processes: false,
            recent: Vec::new(),
        }
    }
}

impl Options {
    /// Remembers a file at the top of the recent list (at most 10).
    pub fn remember(&mut self, path: PathBuf) {
        self.recent.retain(|p| *p != path);
        self.recent.insert(0, path);
        self.recent.truncate(10);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_round_trip_and_tolerate_missing_fields() {
        let mut o = Options {
            tab: Tab::Compare,
            replay_speed: 8.0,
            ..Options::default()
        };
        o.map.rows = 7;
        o.remember("a.fpt".into());
        o.remember("b.fpt".into());
        o.remember("a.fpt".into());
        assert_eq!(
            o.recent,
            vec![PathBuf::from("a.fpt"), PathBuf::from("b.fpt")]
        );
        let s = serde_json::to_string(&o).unwrap();
        let back: Options = serde_json::from_str(&s).unwrap();
        assert_eq!(back, o);
        let partial: Options = serde_json::from_str(r#"{"tab":"Events"}"#).unwrap();
        assert_eq!(partial.tab, Tab::Events);
        assert_eq!(partial.map, map::Options::default());
    }

    #[test]
    fn panel_names_parse() {
        assert_eq!(Tab::parse("Figures"), Ok((Tab::Map, true)));
        assert_eq!(Tab::parse("compare"), Ok((Tab::Compare, false)));
        assert_eq!(Tab::parse("Blocks"), Ok((Tab::Blocks, false)));
        assert!(Tab::parse("nope").unwrap_err().contains("use map"));
    }
}

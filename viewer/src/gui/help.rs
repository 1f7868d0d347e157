//! Keyboard shortcuts and the help overlay (F1 or `?`).

use egui::{Key, Ui};

/// Every shortcut: keys, what it does.
pub const SHORTCUTS: &[(&str, &str)] = &[
    ("F1 / ?", "show or hide this help"),
    ("Space", "play / pause the replay"),
    (". / ,", "step one event forward / back"),
    ("N / P", "next / previous failed allocation"),
    (
        "Home / End",
        "cursor to the start / back to the latest state",
    ),
    ("] / [", "replay faster / slower"),
    ("+ / -", "zoom the map in / out"),
    ("← / →", "pan the map"),
    ("0", "show the whole address space"),
    (
        "1 .. 6",
        "map, timeline, events, processes, compare, blocks",
    ),
    ("F", "show or hide the figures"),
    ("Ctrl+O", "open a trace"),
    ("Esc", "close dialogs, unpin the region"),
];

/// What a key press asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Toggle the help overlay.
    Help,
    /// Play / pause.
    PlayPause,
    /// One event forward (+1) or back (-1).
    Step(i8),
    /// Next failure.
    NextFailure,
    /// Previous failure.
    PrevFailure,
    /// Cursor to the start.
    Start,
    /// Back to the latest state.
    End,
    /// Replay speed ×2 / ÷2.
    Faster,
    /// Replay speed ÷2.
    Slower,
    /// Map zoom in.
    ZoomIn,
    /// Map zoom out.
    ZoomOut,
    /// Map pan left (-1) or right (+1).
    Pan(i8),
    /// Whole address space.
    ResetZoom,
    /// Switch to tab n (0-based).
    Tab(u8),
    /// Toggle the figures.
    Figures,
    /// Open a file.
    Open,
    /// Close dialogs, unpin.
    Escape,
}

/// The commands typed this frame (ignored while a text field has focus).
pub fn commands(ui: &Ui) -> Vec<Command> {
    if ui.ctx().egui_wants_keyboard_input() {
        return Vec::new();
    }
    ui.input(|i| {
        let mut out = Vec::new();
        for e in &i.events {
            match e {
                egui::Event::Text(t) => {
                    for c in t.chars() {
                        let cmd = match c {
                            '?' => Command::Help,
                            '.' => Command::Step(1),
                            ',' => Command::Step(-1),
                            'n' | 'N' => Command::NextFailure,
                            'p' | 'P' => Command::PrevFailure,
                            ']' => Command::Faster,
                            '[' => Command::Slower,
                            '+' | '=' => Command::ZoomIn,
                            '-' => Command::ZoomOut,
                            '0' => Command::ResetZoom,
                            '1'..='6' => Command::Tab(c as u8 - b'1'),
                            'f' | 'F' => Command::Figures,
                            _ => continue,
                        };
                        out.push(cmd);
                    }
                }
                egui::Event::Key {
                    key,
                    pressed: true,
                    modifiers,
                    ..
                } => {
                    let cmd = match key {
                        Key::F1 => Command::Help,
                        Key::Space => Command::PlayPause,
                        Key::Home => Command::Start,
                        Key::End => Command::End,
                        Key::ArrowLeft => Command::Pan(-1),
                        Key::ArrowRight => Command::Pan(1),
                        Key::Escape => Command::Escape,
                        Key::O if modifiers.command => Command::Open,
                        _ => continue,
                    };
                    out.push(cmd);
                }
                _ => {}
            }
        }
        out
    })
}

/// Draws the help overlay while `open`.
pub fn ui(ui: &mut Ui, open: &mut bool) {
    egui::Window::new("Keyboard shortcuts")
        .open(open)
        .collapsible(false)
        .resizable(false)
        .anchor(egui::Align2::CENTER_CENTER, egui::Vec2::ZERO)
        .show(ui.ctx(), |ui| {
            egui::Grid::new("help")
                .num_columns(2)
                .striped(true)
                .show(ui, |ui| {
                    for (keys, what) in SHORTCUTS {
                        ui.monospace(*keys);
                        ui.label(*what);
                        ui.end_row();
                    }
                });
            ui.separator();
            ui.label("Map: wheel zooms, drag pans, click pins a region, double-click resets.");
            ui.label("Timeline: click or drag to move the time cursor; the map rewinds to it.");
            ui.label("Drop trace files on the window to open them.");
        });
}

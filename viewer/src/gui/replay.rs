//! Replay controls: play, pause, speed, step, next/previous failure, and a scrub slider.
//! The cursor is a trace time; `None` means "the latest state" (live or end of trace).

use egui::Ui;

use crate::pipeline::space::human_time;

/// Replay state.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    /// Advancing the cursor by itself.
    pub playing: bool,
    last: Option<std::time::Instant>,
}

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// Put the cursor at this time (ns).
    Seek(u64),
    /// Back to the latest state.
    Latest,
    /// Step one event (+1 / -1).
    Step(i8),
    /// Next failed allocation.
    NextFailure,
    /// Previous failed allocation.
    PrevFailure,
}

impl Replay {
    /// Starts or stops playing.
    pub fn toggle(&mut self) {
        self.playing = !self.playing;
        self.last = None;
    }

    /// While playing: the cursor after `now`, moving `speed` trace seconds per second.
    /// Stops at the end of the span.
    pub fn tick(
        &mut self,
        cursor: Option<u64>,
        span: (u64, u64),
        speed: f64,
        now: std::time::Instant,
    ) -> Option<u64> {
        if !self.playing {
            self.last = None;
            return None;
        }
        let dt = self
            .last
            .map(|l| now.duration_since(l).as_secs_f64())
            .unwrap_or(0.0);
        self.last = Some(now);
        let from = cursor.unwrap_or(span.0);
        let from = if cursor.is_none() || from >= span.1 {
            span.0
        } else {
            from
        };
        let to = from.saturating_add((dt * speed.max(0.0) * 1e9) as u64);
        if to >= span.1 {
            self.playing = false;
            return Some(span.1);
        }
        Some(to)
    }
}

/// Draws the controls bar; returns what the user asked for.
pub fn ui(
    ui: &mut Ui,
    replay: &mut Replay,
    speed: &mut f64,
    cursor: Option<u64>,
    span: (u64, u64),
    failures: usize,
) -> Option<Action> {
    let mut action = None;
    ui.horizontal_wrapped(|ui| {
        let label = if replay.playing { "pause" } else { "play" };
        if ui.button(label).on_hover_text("Space").clicked() {
            replay.toggle();
        }
        if ui.button("< step").on_hover_text(",").clicked() {
            action = Some(Action::Step(-1));
        }
        if ui.button("step >").on_hover_text(".").clicked() {
            action = Some(Action::Step(1));
        }
        ui.add_enabled_ui(failures > 0, |ui| {
            if ui.button("prev failure").on_hover_text("P").clicked() {
                action = Some(Action::PrevFailure);
            }
            if ui.button("next failure").on_hover_text("N").clicked() {
                action = Some(Action::NextFailure);
            }
        });
        if ui.button("latest").on_hover_text("End").clicked() {
            action = Some(Action::Latest);
        }
        let l = ui.label("speed");
        ui.add(
            egui::DragValue::new(speed)
                .range(0.001..=10_000.0)
                .speed(0.05)
                .suffix("x"),
        )
        .labelled_by(l.id);
        let (t0, t1) = span;
        let len = (t1.saturating_sub(t0)) as f64 / 1e9;
        let mut at = cursor
            .map(|c| c.saturating_sub(t0) as f64 / 1e9)
            .unwrap_or(len);
        // Shown to the millisecond, but not rounded: a slider that rounds its value
        // reports a change every frame and drags the cursor off where it was put
        // (`--at 0.0503` ended at 0.049 s).
        let slider = egui::Slider::new(&mut at, 0.0..=len.max(1e-9))
            .suffix(" s")
            .custom_formatter(|v, _| format!("{v:.3}"))
            .text("scrub");
        if ui.add(slider).changed() {
            action = Some(Action::Seek(t0.saturating_add((at * 1e9) as u64)));
        }
        ui.label(match cursor {
            Some(c) => format!("at {}", human_time(c.saturating_sub(t0))),
            None => "latest".to_string(),
        });
    });
    action
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn playing_advances_by_speed_and_stops_at_the_end() {
        let mut r = Replay::default();
        let t = Instant::now();
        assert_eq!(r.tick(Some(5), (0, 10_000_000_000), 1.0, t), None, "paused");
        r.toggle();
        assert_eq!(r.tick(Some(0), (0, 10_000_000_000), 2.0, t), Some(0));
        let c = r.tick(
            Some(0),
            (0, 10_000_000_000),
            2.0,
            t + Duration::from_secs(1),
        );
        assert_eq!(c, Some(2_000_000_000));
        let end = r.tick(c, (0, 10_000_000_000), 2.0, t + Duration::from_secs(10));
        assert_eq!(end, Some(10_000_000_000));
        assert!(!r.playing);
    }
}

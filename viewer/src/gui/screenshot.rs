//! Rendering the viewer to a PNG without a display or a GPU: the egui context runs
//! headlessly at the requested size, its output is tessellated, and the meshes are
//! rasterised on the CPU ([`super::raster`]).

use std::time::Duration;

use egui::{pos2, vec2, Rect};

use super::app::Viewer;
use super::raster::{Canvas, Image, Textures};

/// Frames run before the picture is taken: layout settles, animations finish.
pub const FRAMES: usize = 4;

fn raw_input(size: [u32; 2], frame: usize) -> egui::RawInput {
    let mut input = egui::RawInput {
        screen_rect: Some(Rect::from_min_size(
            pos2(0.0, 0.0),
            vec2(size[0] as f32, size[1] as f32),
        )),
        // A second per frame: every animation is over by the last one.
        time: Some(frame as f64),
        predicted_dt: 1.0,
        ..egui::RawInput::default()
    };
    if let Some(vp) = input.viewports.get_mut(&input.viewport_id) {
        vp.native_pixels_per_point = Some(1.0);
    }
    input
}

/// Draws `ui_fn` for a few frames at `size` (pixels, 1 pixel per point) and rasterises the
/// last frame.
pub fn render_ui(size: [u32; 2], mut ui_fn: impl FnMut(&mut egui::Ui)) -> Image {
    let ctx = egui::Context::default();
    ctx.set_visuals(egui::Visuals::dark());
    let mut textures = Textures::default();
    let mut last = None;
    for frame in 0..FRAMES {
        let mut out = ctx.run_ui(raw_input(size, frame), &mut ui_fn);
        textures.apply(&mut out.textures_delta);
        if frame + 1 < FRAMES {
            textures.free(std::mem::take(&mut out.textures_delta));
        } else {
            last = Some(out);
        }
    }
    let mut canvas = Canvas::new(size[0], size[1], ctx.global_style().visuals.panel_fill);
    if let Some(mut out) = last {
        let shapes = std::mem::take(&mut out.shapes);
        let prims = ctx.tessellate(shapes, out.pixels_per_point);
        canvas.draw(&prims, &textures, out.pixels_per_point);
        textures.free(std::mem::take(&mut out.textures_delta));
    }
    canvas.into_image()
}

/// Renders the viewer: waits (up to `timeout`) for every run to load and for the cursor's
/// model, then takes the picture.
pub fn render(viewer: &mut Viewer, size: [u32; 2], timeout: Duration) -> Result<Image, String> {
    for r in &viewer.runs {
        if !r.wait_loaded(timeout) {
            return Err(format!(
                "{} did not finish loading within {timeout:?}",
                r.name
            ));
        }
        if let Some(e) = r.progress.error() {
            return Err(e);
        }
        if !r.wait_history(timeout) {
            return Err(format!(
                "{}: the timelines were not built within {timeout:?}",
                r.name
            ));
        }
    }
    // One frame to let the viewer place its cursor, then wait for the rewound model.
    let _ = render_ui(size, |ui| viewer.ui(ui));
    for r in &viewer.runs {
        if !r.wait_cursor(timeout) {
            return Err(format!(
                "{}: rewinding to the cursor took longer than {timeout:?}",
                r.name
            ));
        }
    }
    // The events filter and map caches settle over a couple of frames inside render_ui.
    Ok(render_ui(size, |ui| viewer.ui(ui)))
}

/// Parses `--size WxH`.
pub fn parse_size(s: &str) -> Result<[u32; 2], String> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("--size {s:?}: expected WIDTHxHEIGHT, e.g. 1600x1000"))?;
    let p = |v: &str| -> Result<u32, String> {
        let n: u32 = v
            .trim()
            .parse()
            .map_err(|_| format!("--size {s:?}: {v:?} is not a number"))?;
        if !(64..=8192).contains(&n) {
            return Err(format!(
                "--size {s:?}: each side must be 64 ..= 8192 pixels"
            ));
        }
        Ok(n)
    };
    Ok([p(w)?, p(h)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1600x1000"), Ok([1600, 1000]));
        assert_eq!(parse_size("640X480"), Ok([640, 480]));
        assert!(parse_size("1600").is_err());
        assert!(parse_size("10x10").unwrap_err().contains("64"));
    }

    #[test]
    fn headless_text_and_fills_reach_the_picture() {
        let img = render_ui([200, 80], |ui| {
            ui.label("fragprobe");
            let (r, _) = ui.allocate_exact_size(vec2(40.0, 20.0), egui::Sense::hover());
            ui.painter()
                .rect_filled(r, 0.0, egui::Color32::from_rgb(255, 0, 0));
        });
        assert_eq!((img.width, img.height), (200, 80));
        let red = img
            .rgba
            .chunks_exact(4)
            .filter(|p| p[0] == 255 && p[1] == 0 && p[2] == 0)
            .count();
        assert!(
            red >= 40 * 20 - 80,
            "the red box is drawn ({red} red pixels)"
        );
        // Text is anti-aliased glyphs from the font atlas: many distinct greys.
        assert!(
            img.distinct_colours() > 8,
            "{} colours",
            img.distinct_colours()
        );
    }
}

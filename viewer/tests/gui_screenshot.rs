//! `fragprobe view TRACE --screenshot OUT.png`: a real PNG of the requested size, rendered
//! without a display or GPU, showing the map's colours.

mod gui_support;

use fragprobe_viewer::cmd::view::{self, Args};
use fragprobe_viewer::gui::cells::kind_colour;
use fragprobe_viewer::gui::map::LARGEST_HOLE;
use fragprobe_viewer::pipeline::space::RegionKind;
use gui_support::*;

#[test]
fn screenshot_of_the_map_has_the_size_asked_and_the_maps_colours() {
    let dir = temp_dir("shot");
    let trace = dir.join("frag.fpt");
    fragmented(31, None).write(&trace);
    let out = dir.join("map.png");
    let args = Args {
        traces: vec![trace],
        screenshot: Some(out.clone()),
        size: "1000x700".into(),
        panel: Some("map".into()),
        no_nvml: true,
        ..Args::default()
    };
    let code = view::run(&args).expect("screenshot renders");
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let (w, h, rgba) = read_png(&out);
    assert_eq!((w, h), (1000, 700));
    // Live plain allocations (half the 512 MiB in use before the exit) are drawn in the
    // plain-kind colour, and the largest free block is outlined.
    let plain = count(&rgba, kind_colour(RegionKind::Plain));
    assert!(plain > 2000, "plain-allocation pixels: {plain}");
    assert!(count(&rgba, LARGEST_HOLE) > 100, "largest-hole outline");
    let distinct: std::collections::HashSet<_> =
        rgba.chunks_exact(4).map(|p| [p[0], p[1], p[2]]).collect();
    assert!(
        distinct.len() > 50,
        "text and widgets are drawn, not a blank frame"
    );
}

#[test]
fn screenshot_at_the_start_shows_no_allocations() {
    let dir = temp_dir("shot0");
    let trace = dir.join("frag.fpt");
    fragmented(32, None).write(&trace);
    let out = dir.join("start.png");
    let args = Args {
        traces: vec![trace],
        screenshot: Some(out.clone()),
        size: "800x600".into(),
        at: Some("0".into()),
        no_nvml: true,
        ..Args::default()
    };
    view::run(&args).expect("renders");
    let (w, h, rgba) = read_png(&out);
    assert_eq!((w, h), (800, 600));
    assert_eq!(
        count(&rgba, kind_colour(RegionKind::Plain)),
        0,
        "nothing allocated at t = 0"
    );
}

#[test]
fn bad_arguments_are_usage_errors() {
    for (at, size, panel) in [
        (Some("soon"), "800x600", None),
        (None, "800", None),
        (None, "800x600", Some("nope")),
    ] {
        let args = Args {
            traces: vec!["whatever.fpt".into()],
            screenshot: Some("x.png".into()),
            at: at.map(String::from),
            size: size.into(),
            panel: panel.map(String::from),
            no_nvml: true,
            ..Args::default()
        };
        let e = view::run(&args).expect_err("refused");
        assert_eq!(
            fragprobe_viewer::load::exit_code_of(&e),
            fragprobe_viewer::exit::USAGE,
            "{e}"
        );
    }
}

#[test]
fn the_figures_panel_and_the_map_panel_are_different_pictures() {
    let dir = temp_dir("shot-panels");
    let trace = dir.join("frag.fpt");
    fragmented(33, None).write(&trace);
    let shot = |panel: &str| {
        let out = dir.join(format!("{panel}.png"));
        let args = Args {
            traces: vec![trace.clone()],
            screenshot: Some(out.clone()),
            size: "1000x700".into(),
            panel: Some(panel.into()),
            no_nvml: true,
            ..Args::default()
        };
        view::run(&args).expect("renders");
        read_png(&out).2
    };
    let (map, figures) = (shot("map"), shot("figures"));
    assert_ne!(map, figures);
    // The map alone has the whole width; beside the figures it has less.
    let plain = |rgba: &[u8]| count(rgba, kind_colour(RegionKind::Plain));
    assert!(
        plain(&map) > plain(&figures),
        "map {} vs with figures {}",
        plain(&map),
        plain(&figures)
    );
}

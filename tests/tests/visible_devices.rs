//! `CUDA_VISIBLE_DEVICES` on the simulated GPU, as on a real one: CUDA ordinals are
//! renumbered, NVML is not; the probe records the uuid of the GPU behind each ordinal, so
//! a trace names the physical GPU a rank really used.

use fragprobe_simgpu::ident::uuid_string;
use fragprobe_tests::probe::{record_scenario, report_json};

#[test]
fn a_rank_that_sees_gpu_1_as_ordinal_0_is_recorded_on_gpu_1() {
    let rec = record_scenario(
        "leak",
        &[],
        Some("2x1GiB"),
        &[("CUDA_VISIBLE_DEVICES", "1")],
    );
    assert!(
        rec.output.status.success(),
        "{}",
        String::from_utf8_lossy(&rec.output.stderr)
    );
    let v = report_json(&rec.trace);
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{v}");
    // The program allocated on its ordinal 0, which is the second GPU of the machine.
    assert_eq!(devices[0]["ordinal"], 0, "{v}");
    assert_eq!(devices[0]["uuid"], uuid_string(1), "{v}");
    assert_ne!(devices[0]["uuid"], uuid_string(0));
    assert_eq!(v["processes"][0]["cuda_visible_devices"], "1", "{v}");
}

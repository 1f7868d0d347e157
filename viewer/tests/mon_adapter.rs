//! The NVML adapter against fake drivers: every field may fail on its own and becomes
//! "n/a"; `NVML_VALUE_NOT_AVAILABLE` is never used as a number; `-i` selection; the
//! `watch` frame, the `log` rows and the alerts built from such samples.

use fragprobe_viewer::nvml::alert::{Alert, AlertState};
use fragprobe_viewer::nvml::logfile::{self, LogRow};
use fragprobe_viewer::nvml::query::{
    self, ClockKind, Driver, Gpu, RawProcess, VALUE_NOT_AVAILABLE,
};
use fragprobe_viewer::nvml::screen::{self, Style};
use fragprobe_viewer::nvml::{Field, Memory, Monitor, Na};

const MIB: u64 = 1 << 20;

#[derive(Clone)]
struct FakeGpu {
    memory: Field<Memory>,
    util: Field<(u32, u32)>,
    temp: Field<u32>,
    power: Field<u32>,
    limit: Field<u32>,
    ecc: Field<u64>,
    compute: Field<Vec<RawProcess>>,
    graphics: Field<Vec<RawProcess>>,
    mig: Vec<FakeGpu>,
}

impl FakeGpu {
    fn healthy(used_mib: u64) -> FakeGpu {
        FakeGpu {
            memory: Ok(Memory {
                total: 16384 * MIB,
                free: (16384 - 80 - used_mib) * MIB,
                reserved: 80 * MIB,
                used_reported: (used_mib + 80) * MIB,
            }),
            util: Ok((42, 7)),
            temp: Ok(61),
            power: Ok(123_456),
            limit: Ok(300_000),
            ecc: Ok(0),
            compute: Ok(vec![]),
            graphics: Ok(vec![]),
            mig: vec![],
        }
    }
}

impl Gpu for FakeGpu {
    fn name(&self) -> Field<String> {
        Ok("Fake GPU".into())
    }
    fn uuid(&self) -> Field<String> {
        Ok("GPU-fake".into())
    }
    fn memory(&self) -> Field<Memory> {
        self.memory.clone()
    }
    fn utilization(&self) -> Field<(u32, u32)> {
        self.util.clone()
    }
    fn temperature(&self) -> Field<u32> {
        self.temp.clone()
    }
    fn power_usage(&self) -> Field<u32> {
        self.power.clone()
    }
    fn power_limit(&self) -> Field<u32> {
        self.limit.clone()
    }
    fn pstate(&self) -> Field<u32> {
        Err(Na::NotSupported)
    }
    fn clock(&self, which: ClockKind) -> Field<u32> {
        match which {
            ClockKind::Sm => Ok(1410),
            ClockKind::Memory => Err(Na::NoPermission),
        }
    }
    fn ecc(&self, _uncorrected: bool) -> Field<u64> {
        self.ecc.clone()
    }
    fn compute_processes(&self) -> Field<Vec<RawProcess>> {
        self.compute.clone()
    }
    fn graphics_processes(&self) -> Field<Vec<RawProcess>> {
        self.graphics.clone()
    }
    fn mig_devices(&self) -> Field<Vec<Box<dyn Gpu + '_>>> {
        Ok(self
            .mig
            .iter()
            .map(|g| Box::new(g.clone()) as Box<dyn Gpu>)
            .collect())
    }
}

struct FakeDriver {
    gpus: Vec<Field<FakeGpu>>,
}

impl Driver for FakeDriver {
    fn driver_version(&self) -> Field<String> {
        Ok("999.1".into())
    }
    fn device_count(&self) -> Field<u32> {
        Ok(self.gpus.len() as u32)
    }
    fn device(&self, index: u32) -> Field<Box<dyn Gpu + '_>> {
        let g = self
            .gpus
            .get(index as usize)
            .ok_or(Na::Error("no such device".into()))?;
        Ok(Box::new(g.clone()?))
    }
}

fn proc(pid: u32, used: Option<u64>) -> RawProcess {
    RawProcess {
        pid,
        used,
        gpu_instance: None,
        compute_instance: None,
    }
}

#[test]
fn healthy_device_figures() {
    let d = FakeDriver {
        gpus: vec![Ok(FakeGpu::healthy(1000))],
    };
    let s = query::collect(&d, &[], 42);
    assert_eq!(s.unix_ns, 42);
    assert_eq!(s.driver.as_deref(), Ok("999.1"));
    let g = &s.devices[0];
    let m = g.memory.clone().unwrap();
    assert_eq!(
        m.used(),
        1000 * MIB,
        "used = total - free - reserved, not the driver's figure"
    );
    assert_eq!(m.used_reported, 1080 * MIB);
    assert_eq!((g.util_gpu.clone(), g.util_mem.clone()), (Ok(42), Ok(7)));
    assert_eq!(g.power_mw, Ok(123_456));
    assert_eq!(g.pstate, Err(Na::NotSupported));
    assert_eq!(g.clock_sm, Ok(1410));
    assert_eq!(g.clock_mem, Err(Na::NoPermission));
}

#[test]
fn not_available_process_memory_is_none_never_a_number() {
    let mut g = FakeGpu::healthy(500);
    g.compute = Ok(vec![
        proc(10, Some(VALUE_NOT_AVAILABLE)),
        proc(11, None),
        proc(12, Some(300 * MIB)),
    ]);
    g.graphics = Ok(vec![proc(12, Some(300 * MIB)), proc(13, Some(5 * MIB))]);
    let s = query::collect(&FakeDriver { gpus: vec![Ok(g)] }, &[], 0);
    let ps = s.devices[0].processes.clone().unwrap();
    let by = |pid| ps.iter().find(|p| p.pid == pid).unwrap();
    assert_eq!(by(10).used, None);
    assert_eq!(by(11).used, None);
    assert_eq!((by(12).used, by(12).kind.code()), (Some(300 * MIB), "C+G"));
    assert_eq!(by(13).kind.code(), "G");
    // The frame shows n/a for them and sums nothing.
    let style = Style {
        color: false,
        diff: false,
        width: 200,
    };
    let frame = screen::render(&s, None, &style, "t");
    let line10 = frame
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("10"))
        .unwrap();
    assert!(line10.contains("n/a"), "{line10}");
    // The JSON row keeps null, not 18446744073709551615.
    let rows = logfile::rows(&s, &[]);
    let json = logfile::json_line(&rows[0]);
    assert!(json.contains("\"used_bytes\":null"), "{json}");
    assert!(!json.contains(&u64::MAX.to_string()));
}

#[test]
fn permission_and_unsupported_fields_are_na_not_fatal() {
    let mut g = FakeGpu::healthy(0);
    g.temp = Err(Na::NoPermission);
    g.power = Err(Na::NotSupported);
    g.ecc = Ok(VALUE_NOT_AVAILABLE);
    g.compute = Err(Na::NoPermission);
    let s = query::collect(&FakeDriver { gpus: vec![Ok(g)] }, &[], 0);
    let d = &s.devices[0];
    assert_eq!(d.temperature, Err(Na::NoPermission));
    assert_eq!(d.ecc_corrected, Err(Na::NotAvailable));
    assert!(d.processes.is_err());
    assert!(d.memory.is_ok(), "other fields still read");
    let frame = screen::render(
        &s,
        None,
        &Style {
            color: false,
            diff: false,
            width: 200,
        },
        "t",
    );
    assert!(
        frame.contains("process list n/a (no permission)"),
        "{frame}"
    );
    let row = &logfile::rows(&s, &[])[0];
    let line = logfile::csv_line(row);
    let back = logfile::parse(&format!("{}{line}", logfile::csv_header())).unwrap();
    assert_eq!(back.rows[0].temp, None);
    assert_eq!(back.rows[0].power_w, None);
    assert_eq!(back.rows[0].used, Some(0));
    // An alert on an n/a metric neither fires nor crashes.
    let alerts: Vec<Alert> = vec!["temp>10".parse().unwrap(), "power>1W".parse().unwrap()];
    assert!(AlertState::default().update(&alerts, &s).is_empty());
}

#[test]
fn a_failing_device_handle_gives_an_all_na_row() {
    let d = FakeDriver {
        gpus: vec![Ok(FakeGpu::healthy(1)), Err(Na::GpuLost)],
    };
    let s = query::collect(&d, &[], 0);
    assert_eq!(s.devices.len(), 2);
    assert_eq!(s.devices[1].memory, Err(Na::GpuLost));
    let rows: Vec<LogRow> = logfile::rows(&s, &[]);
    assert_eq!(rows[1].used, None);
}

#[test]
fn selection_and_its_errors() {
    let d = FakeDriver {
        gpus: vec![
            Ok(FakeGpu::healthy(1)),
            Ok(FakeGpu::healthy(2)),
            Ok(FakeGpu::healthy(3)),
        ],
    };
    let s = query::collect(&d, &[2, 0], 0);
    assert_eq!(
        s.devices.iter().map(|d| d.index).collect::<Vec<_>>(),
        vec![0, 2]
    );
    assert!(query::check_selection(&d, &[0, 2]).is_ok());
    let e = query::check_selection(&d, &[3]).unwrap_err();
    assert!(
        e.contains("GPU 3 does not exist") && e.contains("3 GPUs"),
        "{e}"
    );
}

#[test]
fn mig_instances_are_sampled_under_their_parent() {
    let mut g = FakeGpu::healthy(100);
    let mut inst = FakeGpu::healthy(10);
    inst.compute = Ok(vec![proc(77, Some(10 * MIB))]);
    g.mig = vec![inst.clone(), inst];
    let s = query::collect(&FakeDriver { gpus: vec![Ok(g)] }, &[], 0);
    assert_eq!(s.devices[0].mig.len(), 2);
    assert_eq!(s.devices[0].mig[1].index, 1);
    let rows = logfile::rows(&s, &[]);
    assert_eq!(
        rows.iter().map(|r| r.mig).collect::<Vec<_>>(),
        vec![None, Some(0), Some(1)]
    );
    let frame = screen::render(
        &s,
        None,
        &Style {
            color: false,
            diff: false,
            width: 250,
        },
        "t",
    );
    assert!(frame.contains("0/mig1"), "{frame}");
}

#[test]
fn monitor_over_a_fake_driver_enriches_processes() {
    let mut g = FakeGpu::healthy(100);
    g.compute = Ok(vec![proc(std::process::id(), Some(MIB))]);
    let mon = Monitor::from_driver(Box::new(FakeDriver { gpus: vec![Ok(g)] }), "fake".into());
    let s = mon.sample(&[]);
    let p = &s.devices[0].process_list()[0];
    let info = p.info.as_ref().expect("our own pid is visible in /proc");
    assert!(!info.cmdline.is_empty());
    assert!(p.probe.is_none(), "this test process has no ring");
}

#[test]
fn missing_library_is_one_clear_line() {
    let e = match fragprobe_viewer::nvml::real::open(Some(std::path::Path::new(
        "/nonexistent/libnvidia-ml.so.1",
    ))) {
        Ok(_) => panic!("a missing library must not open"),
        Err(e) => e,
    };
    assert!(e.contains("/nonexistent/libnvidia-ml.so.1"), "{e}");
    assert!(
        e.contains("FRAGPROBE_NVML_LIB"),
        "says how to point elsewhere: {e}"
    );
    assert!(!e.contains('\n'));
    // A library that is not NVML at all.
    let e = match fragprobe_viewer::nvml::real::open(Some(std::path::Path::new("libc.so.6"))) {
        Ok(_) => panic!("libc is not NVML"),
        Err(e) => e,
    };
    assert!(e.contains("not an NVML library"), "{e}");
}

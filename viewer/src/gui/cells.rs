//! Level of detail for the address-space map: regions are aggregated into a fixed number of
//! cells (one per drawn pixel column or grid cell), so a million live regions cost one
//! pass over the regions plus one quad per run of equal cells — never a million shapes.

use egui::Color32;

use crate::pipeline::space::{RegionKind, RegionView};

const KINDS: usize = RegionKind::ALL.len();

/// What colour a cell gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum ColourBy {
    /// By region kind (plain, managed, pool, VMM mapped / reserved, imported).
    #[default]
    Kind,
    /// By size class (log2 of the largest region in the cell).
    SizeClass,
    /// By age (mean allocation time of the bytes in the cell).
    Age,
}

impl ColourBy {
    /// Every mode, for the selector.
    pub const ALL: [ColourBy; 3] = [ColourBy::Kind, ColourBy::SizeClass, ColourBy::Age];
    /// Label for the selector.
    pub fn name(self) -> &'static str {
        match self {
            ColourBy::Kind => "kind",
            ColourBy::SizeClass => "size class",
            ColourBy::Age => "age",
        }
    }
}

/// The colour of each region kind.
pub fn kind_colour(k: RegionKind) -> Color32 {
    match k {
        RegionKind::Plain => Color32::from_rgb(66, 133, 244),
        RegionKind::Managed => Color32::from_rgb(171, 71, 188),
        RegionKind::Pool => Color32::from_rgb(38, 166, 154),
        RegionKind::VmmMapped => Color32::from_rgb(255, 152, 0),
        RegionKind::VmmReserved => Color32::from_rgb(110, 84, 40),
        RegionKind::Imported => Color32::from_rgb(158, 158, 158),
    }
}

/// Colour of free address space.
pub const FREE: Color32 = Color32::from_rgb(32, 33, 36);

/// Aggregated regions over `[lo, lo + n * bytes_per_cell)`.
#[derive(Clone, Debug)]
pub struct Cells {
    lo: u64,
    bytes_per_cell: f64,
    /// Covered fraction of each cell, per kind.
    cover: Vec<[f32; KINDS]>,
    /// Byte-weighted sum of allocation times (for age colouring).
    age_sum: Vec<f64>,
    /// log2 of the largest region touching the cell (0 = none).
    size_class: Vec<u8>,
    /// Regions starting in the cell.
    starts: Vec<u32>,
    /// Regions visited.
    pub regions: u64,
}

impl Cells {
    /// Empty cells over `[lo, hi)`.
    pub fn new(lo: u64, hi: u64, n: usize) -> Cells {
        let n = n.max(1);
        let span = hi.saturating_sub(lo).max(1) as f64;
        Cells {
            lo,
            bytes_per_cell: span / n as f64,
            cover: vec![[0.0; KINDS]; n],
            age_sum: vec![0.0; n],
            size_class: vec![0; n],
            starts: vec![0; n],
            regions: 0,
        }
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        self.cover.len()
    }

    /// Whether there are no cells (never: `new` makes at least one).
    pub fn is_empty(&self) -> bool {
        self.cover.is_empty()
    }

    /// Bytes each cell stands for.
    pub fn bytes_per_cell(&self) -> f64 {
        self.bytes_per_cell
    }

    /// The address at fractional cell position `pos` (0 ..= len).
    pub fn addr_at(&self, pos: f64) -> u64 {
        self.lo
            .saturating_add((pos.max(0.0) * self.bytes_per_cell) as u64)
    }

    /// The fractional cell position of `addr`.
    pub fn pos_of(&self, addr: u64) -> f64 {
        (addr as f64 - self.lo as f64) / self.bytes_per_cell
    }

    /// Adds one region.
    pub fn add(&mut self, r: &RegionView) {
        self.regions += 1;
        let n = self.cover.len();
        let a = self.pos_of(r.addr);
        let b = self.pos_of(r.addr.saturating_add(r.size));
        if b <= 0.0 || a >= n as f64 {
            return;
        }
        let first = a.max(0.0).floor() as usize;
        let last = ((b.min(n as f64)).ceil() as usize).clamp(first + 1, n);
        let k = r.kind.index();
        let class = (64 - r.size.max(1).leading_zeros()) as u8;
        if a >= 0.0 {
            self.starts[first] = self.starts[first].saturating_add(1);
        }
        for i in first..last {
            let lo = (i as f64).max(a);
            let hi = ((i + 1) as f64).min(b);
            let frac = (hi - lo).max(0.0) as f32;
            self.cover[i][k] += frac;
            if r.kind != RegionKind::VmmReserved {
                self.age_sum[i] += frac as f64 * r.ts_ns as f64;
                self.size_class[i] = self.size_class[i].max(class);
            }
        }
    }

    /// Covered fraction of cell `i` by everything except unmapped reservations (0 ..= 1).
    pub fn used(&self, i: usize) -> f32 {
        let c = &self.cover[i];
        let reserved = RegionKind::VmmReserved.index();
        let s: f32 = c
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != reserved)
            .map(|(_, v)| v)
            .sum();
        s.min(1.0)
    }

    /// Regions starting in cell `i`.
    pub fn starts(&self, i: usize) -> u32 {
        self.starts[i]
    }

    /// The colour of cell `i`. `age_range` is the (oldest, newest) time for age colouring.
    pub fn colour(&self, i: usize, by: ColourBy, age_range: (u64, u64)) -> Color32 {
        let c = &self.cover[i];
        let reserved_idx = RegionKind::VmmReserved.index();
        let reserved = c[reserved_idx].min(1.0);
        let base = lerp(FREE, kind_colour(RegionKind::VmmReserved), reserved);
        let used_sum: f32 = c
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != reserved_idx)
            .map(|(_, v)| v)
            .sum();
        if used_sum <= 0.0 {
            return base;
        }
        let mixed = match by {
            ColourBy::Kind => {
                let (mut r, mut g, mut b) = (0.0f32, 0.0f32, 0.0f32);
                for (k, v) in c.iter().enumerate() {
                    if k == reserved_idx || *v <= 0.0 {
                        continue;
                    }
                    let col = kind_colour(RegionKind::ALL[k]);
                    r += col.r() as f32 * v;
                    g += col.g() as f32 * v;
                    b += col.b() as f32 * v;
                }
                Color32::from_rgb(
                    (r / used_sum) as u8,
                    (g / used_sum) as u8,
                    (b / used_sum) as u8,
                )
            }
            ColourBy::SizeClass => {
                // 512 B (class 10) .. 64 GiB (class 37) across the ramp.
                let t = (self.size_class[i] as f32 - 10.0) / 27.0;
                ramp(t)
            }
            ColourBy::Age => {
                let mean = self.age_sum[i] / used_sum as f64;
                let (old, new) = age_range;
                let t = if new > old {
                    (mean - old as f64) / (new - old) as f64
                } else {
                    1.0
                };
                ramp(t as f32)
            }
        };
        // A region that starts here stays visible even when it covers little of the cell:
        // a tiny allocation splitting a big hole is exactly what the map must show.
        let visible = if self.starts[i] > 0 {
            used_sum.max(0.35)
        } else {
            used_sum
        };
        lerp(base, mixed, visible.min(1.0))
    }
}

/// A perceptual-ish ramp from dark blue (0) through teal and yellow to red (1).
pub fn ramp(t: f32) -> Color32 {
    const STOPS: [[f32; 3]; 5] = [
        [49.0, 54.0, 149.0],
        [33.0, 145.0, 140.0],
        [94.0, 201.0, 98.0],
        [253.0, 231.0, 37.0],
        [215.0, 48.0, 39.0],
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let x = t * (STOPS.len() - 1) as f32;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f32;
    let c = |k: usize| (STOPS[i][k] + (STOPS[i + 1][k] - STOPS[i][k]) * f) as u8;
    Color32::from_rgb(c(0), c(1), c(2))
}

fn lerp(a: Color32, b: Color32, t: f32) -> Color32 {
    let t = t.clamp(0.0, 1.0);
    let m = |x: u8, y: u8| (x as f32 + (y as f32 - x as f32) * t).round() as u8;
    Color32::from_rgb(m(a.r(), b.r()), m(a.g(), b.g()), m(a.b(), b.b()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(addr: u64, size: u64, kind: RegionKind) -> RegionView {
        RegionView {
            addr,
            size,
            kind,
            ts_ns: 0,
        }
    }

    #[test]
    fn coverage_splits_across_cells_exactly() {
        let mut c = Cells::new(0, 1000, 10);
        c.add(&r(50, 200, RegionKind::Plain)); // half of cell 0, all of 1, half of 2
        assert!((c.used(0) - 0.5).abs() < 1e-6);
        assert!((c.used(1) - 1.0).abs() < 1e-6);
        assert!((c.used(2) - 0.5).abs() < 1e-6);
        assert_eq!(c.used(3), 0.0);
        assert_eq!(c.starts(0), 1);
        assert_eq!(c.starts(1), 0);
        assert_eq!(c.colour(5, ColourBy::Kind, (0, 1)), FREE);
        assert_eq!(
            c.colour(1, ColourBy::Kind, (0, 1)),
            kind_colour(RegionKind::Plain)
        );
    }

    #[test]
    fn regions_outside_the_window_are_clipped() {
        let mut c = Cells::new(1000, 2000, 4);
        c.add(&r(0, 500, RegionKind::Plain));
        c.add(&r(1900, 500, RegionKind::Pool));
        assert_eq!(c.used(0), 0.0);
        assert!((c.used(3) - 0.4).abs() < 1e-6);
        assert_eq!(c.starts(3), 1);
    }

    #[test]
    fn reserved_is_background_and_mapped_draws_over_it() {
        let mut c = Cells::new(0, 100, 2);
        c.add(&r(0, 100, RegionKind::VmmReserved));
        c.add(&r(0, 50, RegionKind::VmmMapped));
        assert_eq!(c.used(1), 0.0, "reserved-unmapped is not used memory");
        assert_eq!(
            c.colour(0, ColourBy::Kind, (0, 1)),
            kind_colour(RegionKind::VmmMapped)
        );
        assert_eq!(
            c.colour(1, ColourBy::Kind, (0, 1)),
            kind_colour(RegionKind::VmmReserved)
        );
    }

    #[test]
    fn tiny_region_in_a_huge_cell_stays_visible() {
        let mut c = Cells::new(0, 1 << 30, 1);
        c.add(&r(4096, 512, RegionKind::Plain));
        assert_ne!(c.colour(0, ColourBy::Kind, (0, 1)), FREE);
    }

    #[test]
    fn age_and_size_modes_differ_by_data() {
        let mut c = Cells::new(0, 200, 2);
        c.add(&RegionView {
            addr: 0,
            size: 100,
            kind: RegionKind::Plain,
            ts_ns: 0,
        });
        c.add(&RegionView {
            addr: 100,
            size: 100,
            kind: RegionKind::Plain,
            ts_ns: 1000,
        });
        assert_ne!(
            c.colour(0, ColourBy::Age, (0, 1000)),
            c.colour(1, ColourBy::Age, (0, 1000))
        );
        let mut s = Cells::new(0, 1 << 30, 2);
        s.add(&r(0, 1 << 12, RegionKind::Plain));
        s.add(&r(1 << 29, 1 << 29, RegionKind::Plain));
        assert_ne!(
            s.colour(0, ColourBy::SizeClass, (0, 1)),
            s.colour(1, ColourBy::SizeClass, (0, 1))
        );
    }
}

//! Bounded time series with peak-preserving downsampling.
//!
//! A [`Series`] stores points as columns (struct of arrays): time, min, max, last. A point
//! first covers one pushed value; when the series holds `cap` points, neighbours are merged
//! pairwise (keeping min, max and the later `last`) and from then on each stored point
//! covers twice as many pushes. Memory is therefore bounded by `cap` points while no peak
//! or trough is ever lost, and recent and old data have the same resolution.
//!
//! Values are step functions: a value holds until the next point. Times are made
//! non-decreasing on push (a point earlier than the previous one takes the previous time).

/// One downsampled bucket: the minimum, maximum and last value within `[t, t + width)`.
/// A bucket with no point of its own carries the value in force at its start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    /// Start of the bucket.
    pub t: u64,
    /// Lowest value in the bucket.
    pub min: f64,
    /// Highest value in the bucket.
    pub max: f64,
    /// Value at the bucket's end.
    pub last: f64,
}

/// Default number of stored points per series.
pub const DEFAULT_SERIES_CAP: usize = 16384;

/// One stored point, or the one being filled. Values are stored as bits: the integer
/// itself in an integer series (converted to `f64` when read: the conversion is monotone,
/// so min and max commute with it), `f64::to_bits` otherwise.
#[derive(Clone, Copy, Debug, Default)]
struct Point {
    t: u64,
    min: u64,
    max: u64,
    last: u64,
}

impl Point {
    #[inline]
    fn bucket(self, int: bool) -> Bucket {
        Bucket {
            t: self.t,
            min: value(self.min, int),
            max: value(self.max, int),
            last: value(self.last, int),
        }
    }
}

/// A stored value as `f64`.
#[inline]
fn value(bits: u64, int: bool) -> f64 {
    if int {
        bits as f64
    } else {
        f64::from_bits(bits)
    }
}

/// A bounded time series of one metric.
#[derive(Clone, Debug)]
pub struct Series {
    /// Stored points, in time order (one array: a push touches one cache line).
    pts: Vec<Point>,
    cap: usize,
    stride: u64,
    /// The point being filled; meaningful only while `pending_n > 0`.
    pending: Point,
    /// Pushes folded into `pending` (0: none).
    pending_n: u64,
    /// Time of the last push (0 before the first).
    last_t: u64,
    /// Values are integers (pushed with `push_int`), not `f64` bits.
    int: bool,
}

/// `f64` bits of `+∞`: for values from `+0.0` up to this, the order of the bits as `u64`
/// is the order of the values.
const INF_BITS: u64 = 0x7ff0_0000_0000_0000;

impl Default for Series {
    fn default() -> Series {
        Series::new(DEFAULT_SERIES_CAP)
    }
}

impl Series {
    /// An empty series keeping at most `cap` points (at least 2).
    pub fn new(cap: usize) -> Series {
        Series {
            pts: Vec::new(),
            cap: cap.max(2),
            stride: 1,
            pending: Point::default(),
            pending_n: 0,
            last_t: 0,
            int: false,
        }
    }

    /// An empty series of integer values.
    pub(crate) fn new_int(cap: usize) -> Series {
        Series {
            int: true,
            ..Series::new(cap)
        }
    }

    /// Appends a value at time `t`.
    #[inline]
    pub fn push(&mut self, t: u64, v: f64) {
        debug_assert!(!self.int, "an integer series takes push_int");
        let bits = v.to_bits();
        if bits <= INF_BITS && self.pending_ordered() {
            // Same as below: no NaN, and min/max of such values are min/max of their bits.
            self.push_bits(t, bits);
            return;
        }
        let t = t.max(self.last_t);
        self.last_t = t;
        if self.pending_n == 0 {
            self.pending = Point {
                t,
                min: bits,
                max: bits,
                last: bits,
            };
        } else {
            let p = &mut self.pending;
            let (lo, hi) = (f64::from_bits(p.min), f64::from_bits(p.max));
            if v.is_nan() || lo.is_nan() || hi.is_nan() {
                // `f64::min`/`max` ignore a NaN.
                p.min = lo.min(v).to_bits();
                p.max = hi.max(v).to_bits();
            } else {
                // No NaN: plain comparisons give the same.
                if v < lo {
                    p.min = bits;
                }
                if v > hi {
                    p.max = bits;
                }
            }
            p.last = bits;
        }
        self.pending_n += 1;
        if self.pending_n >= self.stride {
            self.flush();
        }
    }

    /// Whether the point being filled, if any, holds values from `+0.0` to `+∞` only (an
    /// `f64` series).
    #[inline(always)]
    fn pending_ordered(&self) -> bool {
        self.pending_n == 0 || (self.pending.min <= INF_BITS && self.pending.max <= INF_BITS)
    }

    /// Appends an integer value at time `t` (an integer series).
    #[inline(always)]
    pub(crate) fn push_int(&mut self, t: u64, v: u64) {
        debug_assert!(self.int);
        self.push_bits(t, v);
    }

    /// Appends a value whose stored bits order like the values: an integer, or an `f64`
    /// from `+0.0` to `+∞` into a point holding only such values.
    #[inline(always)]
    fn push_bits(&mut self, t: u64, v: u64) {
        let t = t.max(self.last_t);
        self.last_t = t;
        let p = &mut self.pending;
        if self.pending_n == 0 {
            *p = Point {
                t,
                min: v,
                max: v,
                last: v,
            };
        } else {
            p.min = p.min.min(v);
            p.max = p.max.max(v);
            p.last = v;
        }
        self.pending_n += 1;
        if self.pending_n >= self.stride {
            self.flush();
        }
    }

    /// Appends a value only if it differs from the last one (the step function is the same).
    #[inline]
    pub fn push_if_changed(&mut self, t: u64, v: f64) {
        if self.last_value() != Some(v) {
            self.push(t, v);
        }
    }

    #[inline(never)]
    fn flush(&mut self) {
        self.pending_n = 0;
        self.pts.push(self.pending);
        if self.pts.len() >= self.cap {
            self.compact();
        }
    }

    /// Merges neighbouring points pairwise; each point now covers twice as many pushes.
    #[cold]
    fn compact(&mut self) {
        let n = self.pts.len();
        let mut w = 0;
        let mut i = 0;
        while i < n {
            let j = (i + 1).min(n - 1);
            let (a, b) = (self.pts[i], self.pts[j]);
            self.pts[w] = if self.int {
                Point {
                    t: a.t,
                    min: a.min.min(b.min),
                    max: a.max.max(b.max),
                    last: b.last,
                }
            } else {
                let (am, bm) = (f64::from_bits(a.min), f64::from_bits(b.min));
                let (ax, bx) = (f64::from_bits(a.max), f64::from_bits(b.max));
                Point {
                    t: a.t,
                    min: am.min(bm).to_bits(),
                    max: ax.max(bx).to_bits(),
                    last: b.last,
                }
            };
            w += 1;
            i += 2;
        }
        self.pts.truncate(w);
        self.stride = self.stride.saturating_mul(2);
    }

    /// Number of points (stored plus the one being filled).
    pub fn len(&self) -> usize {
        self.pts.len() + usize::from(self.pending_n > 0)
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many pushes one stored point covers now.
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// The last value pushed (the `last` of the newest point: merging keeps the later one).
    pub fn last_value(&self) -> Option<f64> {
        let p = if self.pending_n > 0 {
            Some(&self.pending)
        } else {
            self.pts.last()
        };
        p.map(|p| value(p.last, self.int))
    }

    /// Time of the first point.
    pub fn first_t(&self) -> Option<u64> {
        match self.pts.first() {
            Some(p) => Some(p.t),
            None => (self.pending_n > 0).then_some(self.pending.t),
        }
    }

    /// Time of the last point.
    pub fn last_t(&self) -> Option<u64> {
        (!self.is_empty()).then_some(self.last_t)
    }

    /// The highest value ever pushed.
    pub fn max_value(&self) -> Option<f64> {
        self.points().map(|b| b.max).reduce(f64::max)
    }

    /// Every point in order, as buckets (a point covers `stride` pushes).
    pub fn points(&self) -> impl Iterator<Item = Bucket> + '_ {
        (0..self.len()).map(|i| self.point(i))
    }

    fn point(&self, i: usize) -> Bucket {
        match self.pts.get(i) {
            Some(p) => p.bucket(self.int),
            None if self.pending_n > 0 => self.pending.bucket(self.int),
            None => Point::default().bucket(false),
        }
    }

    /// Downsamples `[t0, t1)` into at most `buckets` buckets of equal width for plotting.
    ///
    /// Every point inside the range lands in exactly one bucket's min/max, so no peak is
    /// lost. Buckets before the first known value are left out; later buckets without a
    /// point carry the value in force. Cost: O(buckets + points in range + log points).
    pub fn downsample(&self, t0: u64, t1: u64, buckets: usize) -> Vec<Bucket> {
        if buckets == 0 || t1 <= t0 {
            return Vec::new();
        }
        let span = t1 - t0;
        let width = span.div_ceil(buckets as u64).max(1);
        let n = span.div_ceil(width);
        let total = self.len();
        let mut i = self.pts.partition_point(|p| p.t < t0);
        if i == self.pts.len() && self.pending_n > 0 && self.pending.t < t0 {
            i = total;
        }
        let mut carry = if i > 0 {
            Some(self.point(i - 1).last)
        } else {
            None
        };
        let mut out = Vec::with_capacity(n as usize);
        for b in 0..n {
            let start = t0 + b * width;
            let stop = start.saturating_add(width).min(t1);
            let mut cur = carry.map(|v| Bucket {
                t: start,
                min: v,
                max: v,
                last: v,
            });
            let mut i_first = true;
            while i < total {
                let p = self.point(i);
                if p.t >= stop {
                    break;
                }
                // A point exactly at the bucket's start replaces the carried value.
                let carried_only = cur.is_some() && p.t == start && i_first;
                i_first = false;
                cur = Some(match cur {
                    Some(_) if carried_only => Bucket { t: start, ..p },
                    Some(c) => Bucket {
                        t: start,
                        min: c.min.min(p.min),
                        max: c.max.max(p.max),
                        last: p.last,
                    },
                    None => Bucket { t: start, ..p },
                });
                carry = Some(p.last);
                i += 1;
            }
            if let Some(c) = cur {
                out.push(c);
            }
        }
        out
    }
}

/// The metrics a [`SeriesSet`] records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// [`Totals::live_bytes`](super::Totals::live_bytes).
    Live,
    /// Managed bytes.
    Managed,
    /// Mapped VMM bytes.
    Mapped,
    /// Reserved VMM address space.
    Reserved,
    /// The arena's largest free block.
    LargestFree,
    /// The arena's total free bytes.
    TotalFree,
    /// The arena's fragmentation ratio.
    FragRatio,
    /// NVML's device used bytes (devices only, when sampled).
    NvmlUsed,
    /// The driver's used bytes, `total − free` from `cuMemGetInfo` (devices only).
    DriverUsed,
}

impl Metric {
    /// Every metric.
    pub const ALL: &'static [Metric] = &[
        Metric::Live,
        Metric::Managed,
        Metric::Mapped,
        Metric::Reserved,
        Metric::LargestFree,
        Metric::TotalFree,
        Metric::FragRatio,
        Metric::NvmlUsed,
        Metric::DriverUsed,
    ];
    /// Whether the metric is a sample the device is given (NVML's or the driver's used
    /// bytes), not a figure the model records after each event.
    pub fn is_sample(self) -> bool {
        matches!(self, Metric::NvmlUsed | Metric::DriverUsed)
    }
    /// Stable name for exports.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Live => "live_bytes",
            Metric::Managed => "managed_bytes",
            Metric::Mapped => "mapped_bytes",
            Metric::Reserved => "reserved_bytes",
            Metric::LargestFree => "largest_free_bytes",
            Metric::TotalFree => "total_free_bytes",
            Metric::FragRatio => "frag_ratio",
            Metric::NvmlUsed => "nvml_used_bytes",
            Metric::DriverUsed => "driver_used_bytes",
        }
    }
}

/// The time series of a space or device as read: the metrics the model records after each
/// event may come from another set (a device with one space shares that space's; see
/// [`Model::device_series`]), the NVML and driver samples are the device's own.
///
/// [`Model::device_series`]: super::Model::device_series
#[derive(Clone, Copy, Debug)]
pub struct SeriesView<'a> {
    /// The NVML and driver samples.
    pub(crate) own: &'a SeriesSet,
    /// Every other metric: those [`SeriesSet::record`] pushes.
    pub(crate) recorded: &'a SeriesSet,
}

impl<'a> SeriesView<'a> {
    /// The series of one metric.
    pub fn get(&self, m: Metric) -> &'a Series {
        if m.is_sample() {
            self.own.get(m)
        } else {
            self.recorded.get(m)
        }
    }
}

/// The time series of one space or device. Only changes are pushed.
#[derive(Clone, Debug)]
pub struct SeriesSet {
    s: [Series; 9],
    /// The value last recorded per metric (`record`'s metrics only: the integer, or the
    /// ratio's `f64` bits): an unchanged integer is an unchanged value, so most metrics are
    /// skipped without a conversion to `f64`.
    raw: [u64; 9],
    /// Bit `i`: `raw[i]` holds a recorded value.
    has: u16,
}

// `record`'s integer metrics are the first six.
const _: () = assert!(
    Metric::Live as usize == 0
        && Metric::Managed as usize == 1
        && Metric::Mapped as usize == 2
        && Metric::Reserved as usize == 3
        && Metric::LargestFree as usize == 4
        && Metric::TotalFree as usize == 5
        && Metric::FragRatio as usize == 6
);

impl SeriesSet {
    /// Empty series of `cap` points each.
    pub fn new(cap: usize) -> SeriesSet {
        SeriesSet {
            // `record`'s integer metrics (the first six) store integers.
            s: core::array::from_fn(|i| {
                if i < Metric::FragRatio as usize {
                    Series::new_int(cap)
                } else {
                    Series::new(cap)
                }
            }),
            raw: [0; 9],
            has: 0,
        }
    }

    /// The series of one metric.
    pub fn get(&self, m: Metric) -> &Series {
        &self.s[m as usize]
    }

    /// These series as a [`SeriesView`].
    pub fn view(&self) -> SeriesView<'_> {
        SeriesView {
            own: self,
            recorded: self,
        }
    }

    /// The `has` bits of the metrics `record` pushes (all but the samples).
    const RECORDED: u16 = (1 << (Metric::FragRatio as u16 + 1)) - 1;

    /// Whether `record` ever pushed anything.
    pub(crate) fn has_recorded(&self) -> bool {
        self.has & SeriesSet::RECORDED != 0
    }

    /// Takes the series and recorded values of `record`'s metrics from `o`, keeping these
    /// samples (a device that stops sharing its only space's series gets its own copy; a
    /// space starting to share its device's, the device's zeros from before it).
    pub(crate) fn adopt_recorded(&mut self, o: &SeriesSet) {
        for i in 0..=Metric::FragRatio as usize {
            self.s[i] = o.s[i].clone();
            self.raw[i] = o.raw[i];
        }
        self.has = self.has & !SeriesSet::RECORDED | o.has & SeriesSet::RECORDED;
    }

    /// Pushes `v` for `m` if it differs from the integer recorded last; `true` if it did.
    #[inline(always)]
    fn put(&mut self, m: Metric, t: u64, v: u64) -> bool {
        let i = m as usize;
        let bit = 1u16 << i;
        let (old, had) = (self.raw[i], self.has & bit != 0);
        if had && old == v {
            return false;
        }
        self.raw[i] = v;
        self.has |= bit;
        // Only `record` pushes this metric, so the series' last value is `old` (or there is
        // none). The step function is that of the values as `f64`: distinct integers below
        // 2^53 differ there too; above, two may be the same `f64`, and then nothing changed.
        if !(had && (v | old) >> 53 != 0 && v as f64 == old as f64) {
            self.s[i].push_int(t, v);
        }
        true
    }

    /// Pushes what changed of the figures `record` tracks.
    #[inline(always)]
    pub(crate) fn record(
        &mut self,
        t: u64,
        totals: &super::Totals,
        arena: Option<&super::ArenaFigures>,
        ratio: f64,
    ) {
        self.put(Metric::Live, t, totals.live_bytes);
        // Managed, mapped and reserved bytes rarely change: one test for the three.
        let (mg, mp, rs) = (
            totals.managed_bytes,
            totals.mapped_bytes,
            totals.reserved_bytes,
        );
        let raw = |m: Metric| self.raw[m as usize];
        let (rmg, rmp, rrs) = (
            raw(Metric::Managed),
            raw(Metric::Mapped),
            raw(Metric::Reserved),
        );
        const THREE: u16 =
            1 << Metric::Managed as u16 | 1 << Metric::Mapped as u16 | 1 << Metric::Reserved as u16;
        if (mg ^ rmg) | (mp ^ rmp) | (rs ^ rrs) != 0 || self.has & THREE != THREE {
            self.put(Metric::Managed, t, mg);
            self.put(Metric::Mapped, t, mp);
            self.put(Metric::Reserved, t, rs);
        }
        if let Some(a) = arena {
            let l = self.put(Metric::LargestFree, t, a.largest_free);
            let f = self.put(Metric::TotalFree, t, a.total_free);
            // The ratio is a function of the two: unchanged when both are.
            if l || f {
                self.put_ratio(t, ratio);
            }
        }
    }

    /// Pushes the fragmentation ratio if it differs from the one pushed last (only `record`
    /// pushes it, so `raw` holds that one's bits).
    #[inline(always)]
    fn put_ratio(&mut self, t: u64, v: f64) {
        const I: usize = Metric::FragRatio as usize;
        const BIT: u16 = 1 << I;
        if self.has & BIT != 0 && f64::from_bits(self.raw[I]) == v {
            return;
        }
        self.raw[I] = v.to_bits();
        self.has |= BIT;
        self.s[I].push(t, v);
    }

    /// Pushes `v` for `m`, one of the metrics `record` does not push, if it changed.
    #[inline]
    pub(crate) fn push(&mut self, m: Metric, t: u64, v: f64) {
        debug_assert!(matches!(m, Metric::NvmlUsed | Metric::DriverUsed));
        self.s[m as usize].push_if_changed(t, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_keeps_the_peak_after_compaction() {
        let mut s = Series::new(16);
        for i in 0..10_000u64 {
            let v = if i == 7777 { 1e9 } else { (i % 100) as f64 };
            s.push(i * 10, v);
        }
        assert!(s.len() <= 16);
        assert_eq!(s.max_value(), Some(1e9));
        let b = s.downsample(0, 100_000, 3);
        assert_eq!(b.len(), 3);
        assert_eq!(b.iter().map(|b| b.max).fold(0.0, f64::max), 1e9);
        assert_eq!(b.iter().map(|b| b.min).fold(f64::MAX, f64::min), 0.0);
    }

    #[test]
    fn empty_buckets_carry_the_value_in_force() {
        let mut s = Series::new(100);
        s.push(10, 1.0);
        s.push(55, 5.0);
        s.push(70, 7.0);
        let b = s.downsample(0, 100, 10);
        // Nothing before t = 10: the first bucket [0, 10) is left out.
        assert_eq!(b.first().map(|b| b.t), Some(10));
        let at = |t: u64| b.iter().find(|x| x.t == t).copied().unwrap();
        assert_eq!((at(20).min, at(20).max), (1.0, 1.0));
        assert_eq!((at(50).min, at(50).max, at(50).last), (1.0, 5.0, 5.0));
        // A point exactly at a bucket's start: the carried value was never in force there.
        assert_eq!((at(70).min, at(70).max), (7.0, 7.0));
        assert_eq!(at(90).last, 7.0);
        // A window starting after all points carries the last value.
        let late = s.downsample(1000, 2000, 2);
        assert_eq!(late.len(), 2);
        assert_eq!(late[0].last, 7.0);
    }

    #[test]
    fn nan_values_are_ignored_by_min_and_max_as_before() {
        // cap 2: every flush compacts, so points merge pushes that started with a NaN.
        let mut s = Series::new(2);
        let n = f64::NAN;
        for v in [n, 1.0, 5.0, n, 0.5, 2.0, 3.0, 4.0, n, 7.0, 8.0] {
            s.push(0, v);
        }
        assert_eq!(s.max_value(), Some(8.0));
        let min = s.points().map(|b| b.min).fold(f64::INFINITY, f64::min);
        assert_eq!(min, 0.5);
        assert!(s.points().all(|b| !b.min.is_nan() && !b.max.is_nan()));
    }

    #[test]
    fn integer_series_read_like_f64_series() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut a = Series::new_int(8);
        let mut b = Series::new(8);
        for i in 0..5_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Small values and ones above 2^53 (where neighbours share an f64).
            let v = if i % 3 == 0 { x } else { x % 1000 };
            a.push_int(i * 7 / 3, v);
            b.push(i * 7 / 3, v as f64);
        }
        assert_eq!(
            a.points().collect::<Vec<_>>(),
            b.points().collect::<Vec<_>>()
        );
        assert_eq!(a.downsample(100, 9_000, 37), b.downsample(100, 9_000, 37));
        assert_eq!(
            (
                a.last_value(),
                a.last_t(),
                a.max_value(),
                a.stride(),
                a.len()
            ),
            (
                b.last_value(),
                b.last_t(),
                b.max_value(),
                b.stride(),
                b.len()
            )
        );
    }

    #[test]
    fn time_is_made_monotone() {
        let mut s = Series::new(100);
        s.push(100, 1.0);
        s.push(50, 2.0);
        assert_eq!(s.points().map(|p| p.t).collect::<Vec<_>>(), vec![100, 100]);
    }
}

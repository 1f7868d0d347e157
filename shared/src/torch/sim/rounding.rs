//! Request rounding and segment sizing of the native caching allocator.

/// All sizes are rounded to at least this many bytes (`kMinBlockSize`).
pub const MIN_BLOCK: u64 = 512;
/// Largest "small" request (`kSmallSize`, 1 MiB).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Small-pool segment size (`kSmallBuffer`, 2 MiB); also the small expandable page.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Default large segment for 1–10 MiB requests (`kLargeBuffer`, 20 MiB).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Requests from this size on get their own segment (`kMinLargeAlloc`, 10 MiB).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Large own-segment requests are rounded up to this (`kRoundLarge`, 2 MiB).
pub const ROUND_LARGE: u64 = 2 << 20;
/// Number of power-of-two intervals of `roundup_power2_divisions` (1 MiB … 64 GiB).
pub const ROUNDUP_INTERVALS: usize = 16;

/// Which `roundup_power2_divisions` entry applies to `size`: interval `i` starts at 2^i MiB;
/// sizes below 1 MiB use entry 0 and sizes of 32 GiB and more use entry 15.
pub fn division_index(size: u64) -> usize {
    let log = 63 - size.max(1).leading_zeros() as usize;
    log.saturating_sub(20).min(ROUNDUP_INTERVALS - 1)
}

/// `roundup_power2_next_division`: the next of `divisions` equal steps between the powers
/// of two around `size` (exact powers of two stay).
pub fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let rounded = size & !(step - 1);
    if rounded == size {
        size
    } else {
        rounded.saturating_add(step)
    }
}

/// `round_size`: what a request of `size` bytes occupies.
pub fn round_size(size: u64, divisions: &[u64; ROUNDUP_INTERVALS]) -> u64 {
    if size < MIN_BLOCK {
        return MIN_BLOCK;
    }
    let d = divisions[division_index(size)];
    if d > 1 && size > MIN_BLOCK * d {
        roundup_power2_next_division(size, d)
    } else {
        size.div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
    }
}

/// `get_allocation_size`: the segment a rounded request gets when nothing cached fits.
pub fn allocation_size(size: u64, large_segment: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        large_segment
    } else {
        size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_512_by_default() {
        let none = [0; ROUNDUP_INTERVALS];
        assert_eq!(round_size(1, &none), 512);
        assert_eq!(round_size(512, &none), 512);
        assert_eq!(round_size(513, &none), 1024);
        assert_eq!(round_size(30_720_000, &none), 30_720_000);
        assert_eq!(round_size(30_720_001, &none), 30_720_512);
    }

    #[test]
    fn power2_divisions_follow_pytorch_example() {
        // PyTorch's comment: 1200 with 4 divisions between 1024 and 2048 → 1280.
        assert_eq!(roundup_power2_next_division(1200, 4), 1280);
        assert_eq!(roundup_power2_next_division(1024, 4), 1024);
        assert_eq!(roundup_power2_next_division(1280, 4), 1280);
        let four = [4; ROUNDUP_INTERVALS];
        // Below 512·d the plain 512 rounding applies.
        assert_eq!(round_size(1200, &four), 1536);
        assert_eq!(round_size(3 << 20 | 1, &four), 3584 << 10);
        // Exact powers of two stay.
        assert_eq!(round_size(8 << 20, &four), 8 << 20);
    }

    #[test]
    fn intervals_start_at_one_mib() {
        assert_eq!(division_index(1), 0);
        assert_eq!(division_index((1 << 20) - 1), 0);
        assert_eq!(division_index(1 << 20), 0);
        assert_eq!(division_index(2 << 20), 1);
        assert_eq!(division_index(256 << 20), 8);
        assert_eq!(division_index(u64::MAX), 15);
    }

    #[test]
    fn huge_sizes_do_not_overflow() {
        assert_eq!(round_size(u64::MAX, &[0; ROUNDUP_INTERVALS]), u64::MAX);
        assert_eq!(round_size(u64::MAX - 3, &[8; ROUNDUP_INTERVALS]), u64::MAX);
        assert_eq!(allocation_size(u64::MAX, LARGE_BUFFER), u64::MAX);
    }

    #[test]
    fn segment_sizes() {
        assert_eq!(allocation_size(512, LARGE_BUFFER), SMALL_BUFFER);
        assert_eq!(allocation_size(SMALL_SIZE, LARGE_BUFFER), SMALL_BUFFER);
        assert_eq!(
            allocation_size(SMALL_SIZE + 512, LARGE_BUFFER),
            LARGE_BUFFER
        );
        assert_eq!(
            allocation_size(MIN_LARGE_ALLOC - 512, LARGE_BUFFER),
            LARGE_BUFFER
        );
        assert_eq!(
            allocation_size(MIN_LARGE_ALLOC, LARGE_BUFFER),
            MIN_LARGE_ALLOC
        );
        assert_eq!(allocation_size(30_720_000, LARGE_BUFFER), 31_457_280);
        assert_eq!(allocation_size(3 << 20, 64 << 20), 64 << 20);
    }
}

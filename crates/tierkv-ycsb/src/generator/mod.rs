//! YCSB's number generators (DESIGN §6), rebuilt from YCSB's `site.ycsb.generator` package:
//!
//! | here | YCSB | what it draws |
//! |---|---|---|
//! | [`zipfian::Zipfian`] | `ZipfianGenerator` | item 0 most popular, θ = 0.99 (Gray et al., SIGMOD '94) |
//! | [`scrambled::ScrambledZipfian`] | `ScrambledZipfianGenerator` | zipfian over 10^10 items, FNV-hashed onto the key space |
//! | [`latest::SkewedLatest`] | `SkewedLatestGenerator` | zipfian distance back from the newest acknowledged insert |
//! | [`uniform::Uniform`] | `UniformLongGenerator` | uniform over a fixed range |
//! | [`counter::Counter`], [`counter::AcknowledgedCounter`] | `CounterGenerator`, `AcknowledgedCounterGenerator` | insert ordinals |
//!
//! Thread safety: the drawing generators are plain values owned by one client thread (clone
//! one per thread; they take the thread's RNG as an argument, so a seed fixes the stream).
//! The counters are shared between threads and lock-free except for the acknowledgement
//! window's advance, which is a `try_lock` as in YCSB.

pub mod counter;
pub mod latest;
pub mod scrambled;
pub mod uniform;
pub mod zipfian;

/// FNV-1 offset basis, 64 bits (YCSB `Utils.FNV_OFFSET_BASIS_64`).
pub const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
/// FNV-1 prime, 64 bits (YCSB `Utils.FNV_PRIME_64`).
pub const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64`: FNV-1a over the eight little-end-first octets of `val`, then the
/// absolute value of the result read as a signed 64-bit integer.
///
/// Matches YCSB bit for bit for every `val < 2^63` (all ordinals YCSB can produce). The one
/// hash YCSB leaves negative, `Math.abs(Long.MIN_VALUE)`, is returned here as `2^63`.
pub fn fnvhash64(val: u64) -> u64 {
    let mut v = val;
    let mut hash = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        let octet = v & 0xff;
        v >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    (hash as i64).unsigned_abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnvhash64_matches_ycsb_reference_values() {
        // YCSB's first loaded keys are "user6284781860667377211", "user8517097267634966620",
        // ...: fnvhash64 of the ordinals 0, 1, ... (values from YCSB's Java implementation).
        let expected: [(u64, u64); 5] = [
            (0, 6_284_781_860_667_377_211),
            (1, 8_517_097_267_634_966_620),
            (2, 1_820_151_046_732_198_393),
            (12_345, 1_792_800_413_050_876_852),
            (99_999, 7_592_201_923_306_675_823),
        ];
        for (ordinal, hash) in expected {
            assert_eq!(fnvhash64(ordinal), hash, "ordinal {ordinal}");
        }
    }

    #[test]
    fn fnvhash64_is_never_negative_as_a_java_long() {
        for i in 0..100_000u64 {
            assert!(fnvhash64(i) <= i64::MAX as u64, "ordinal {i}");
        }
    }
}

//! Key-range partitioning (PrismDB §4.1, §6: "client requests are forwarded to the
//! partition of their key").
//!
//! Partitions are disjoint key ranges cut by `P - 1` boundary keys (byte order): partition
//! `i` holds keys in `[bound[i-1], bound[i])`, the first from the empty key, the last to the
//! end. Scans visit partitions in order, so a scan across partitions stays ordered.
//!
//! The paper's keys are dense 8-byte integers, split into equal integer ranges. Ours are
//! arbitrary bytes; the default boundaries are chosen for YCSB keys, `"user"` followed by
//! the decimal digits of a 63-bit hash (`tierkv_ycsb::keys`): 90% of them have 19 digits,
//! with the leading two digits spread evenly over 10..92 (2^63 = 9.22e18), the rest 18
//! digits, also spread over 10..99. The boundaries are therefore `prefix + NN` with `NN`
//! evenly spaced in 10..92, so YCSB keys land in every partition in about equal numbers
//! (`ycsb_keys_spread_over_partitions` checks it). Other key sets keep correct results but
//! may crowd a partition: give explicit `bounds=` (or `partition_prefix=`) for them. The
//! boundaries are recorded in the superblock at create.
//!
//! Thread safety: immutable after construction.

/// Generated boundaries: `prefix` + two decimal digits evenly spaced in 10..92.
pub fn default_bounds(prefix: &[u8], partitions: usize) -> Vec<Vec<u8>> {
    (1..partitions)
        .map(|i| {
            let v = 10 + (82 * i) / partitions;
            let mut b = prefix.to_vec();
            b.extend_from_slice(format!("{v:02}").as_bytes());
            b
        })
        .collect()
}

/// The partition boundaries of a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMap {
    bounds: Vec<Vec<u8>>,
}

impl PartitionMap {
    /// A map with these boundaries (must be strictly ascending).
    pub fn new(bounds: Vec<Vec<u8>>) -> tierkv_core::Result<PartitionMap> {
        if bounds.windows(2).any(|w| w.first() >= w.get(1)) || bounds.iter().any(Vec::is_empty) {
            return Err(tierkv_core::Error::invalid(
                "prismdb: partition bounds must be non-empty and strictly ascending",
            ));
        }
        Ok(PartitionMap { bounds })
    }

    /// Number of partitions.
    pub fn len(&self) -> usize {
        self.bounds.len() + 1
    }

    /// Always false (there is at least one partition).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The boundaries.
    pub fn bounds(&self) -> &[Vec<u8>] {
        &self.bounds
    }

    /// The partition holding `key`.
    pub fn partition_of(&self, key: &[u8]) -> usize {
        self.bounds.partition_point(|b| b.as_slice() <= key)
    }

    /// The first key of partition `p` (empty for the first).
    pub fn lower(&self, p: usize) -> &[u8] {
        match p.checked_sub(1).and_then(|i| self.bounds.get(i)) {
            Some(b) => b,
            None => &[],
        }
    }

    /// The exclusive upper bound of partition `p` (`None` for the last).
    pub fn upper(&self, p: usize) -> Option<&[u8]> {
        self.bounds.get(p).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    /// YCSB's key of ordinal `n` (FNV-1a 64 of the ordinal's 8 bytes, as `tierkv-ycsb`).
    fn ycsb_key(n: u64) -> Vec<u8> {
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        let mut v = n;
        for _ in 0..8 {
            let octet = v & 0xff;
            v >>= 8;
            h ^= octet;
            h = h.wrapping_mul(1_099_511_628_211);
        }
        format!("user{}", (h as i64).unsigned_abs()).into_bytes()
    }

    #[test]
    fn ycsb_keys_spread_over_partitions() {
        let map = PartitionMap::new(default_bounds(b"user", 8)).unwrap();
        let mut counts = [0u64; 8];
        for n in 0..80_000 {
            counts[map.partition_of(&ycsb_key(n))] += 1;
        }
        for c in counts {
            assert!(
                (6_000..14_000).contains(&c),
                "uneven partitions: {counts:?}"
            );
        }
    }

    #[test]
    fn partitions_are_ordered_ranges() {
        let map = PartitionMap::new(vec![b"g".to_vec(), b"p".to_vec()]).unwrap();
        assert_eq!(map.partition_of(b"a"), 0);
        assert_eq!(map.partition_of(b"g"), 1);
        assert_eq!(map.partition_of(b"o\xff"), 1);
        assert_eq!(map.partition_of(b"zz"), 2);
        assert_eq!(map.lower(1), b"g");
        assert_eq!(map.upper(2), None);
        assert!(PartitionMap::new(vec![b"p".to_vec(), b"g".to_vec()]).is_err());
    }
}

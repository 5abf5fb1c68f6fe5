//! The 2Q *policy* of the Scan-aware Value Cache (PRISM §4.4, Figure 3 ①–④), as pure
//! functions of list sizes. The mechanism that applies them is `svc::lists::TwoQueue`,
//! driven by the cache's background thread.
//!
//! - a value read from flash enters the *inactive* list (①);
//! - a second access promotes it to the head of the *active* list, and an access in the
//!   active list moves it back to the head (②);
//! - when the active list holds more than its share of the capacity, values at its tail
//!   are demoted to the head of the inactive list (③);
//! - when the cache holds more than its capacity, values are evicted from the tail of the
//!   inactive list, or of the active list when the inactive one is empty (④).
//!
//! Thread safety: pure functions.

/// Which 2Q list an entry is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// Entries seen once (or demoted): the eviction candidates.
    Inactive,
    /// Entries seen at least twice.
    Active,
}

/// The share of the capacity the active list may hold before it is demoted from.
pub const ACTIVE_SHARE_PERCENT: u64 = 50;

/// Where an entry goes when it is accessed again while on `current` (②). Always the head
/// of the active list: a second access promotes, a later one refreshes.
pub fn on_access(_current: ListKind) -> ListKind {
    ListKind::Active
}

/// The byte limit of the active list for a cache of `capacity` bytes.
pub fn active_limit(capacity: u64) -> u64 {
    capacity / 100 * ACTIVE_SHARE_PERCENT + capacity % 100 * ACTIVE_SHARE_PERCENT / 100
}

/// True when the active list's tail must be demoted (③).
pub fn should_demote(active_bytes: u64, capacity: u64) -> bool {
    active_bytes > active_limit(capacity)
}

/// The list to evict from when the cache holds `total_bytes` (④), if any eviction is due.
pub fn eviction_source(
    total_bytes: u64,
    capacity: u64,
    inactive_len: usize,
    active_len: usize,
) -> Option<ListKind> {
    if total_bytes <= capacity {
        None
    } else if inactive_len > 0 {
        Some(ListKind::Inactive)
    } else if active_len > 0 {
        Some(ListKind::Active)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_access_lands_on_the_active_list() {
        assert_eq!(on_access(ListKind::Inactive), ListKind::Active);
        assert_eq!(on_access(ListKind::Active), ListKind::Active);
    }

    #[test]
    fn active_list_is_demoted_past_half_the_capacity() {
        assert_eq!(active_limit(1000), 500);
        assert_eq!(active_limit(u64::MAX), u64::MAX / 100 * 50 + 7);
        assert!(!should_demote(500, 1000));
        assert!(should_demote(501, 1000));
    }

    #[test]
    fn eviction_prefers_the_inactive_list_and_stops_within_capacity() {
        assert_eq!(eviction_source(1000, 1000, 5, 5), None);
        assert_eq!(eviction_source(1001, 1000, 5, 5), Some(ListKind::Inactive));
        assert_eq!(eviction_source(1001, 1000, 0, 5), Some(ListKind::Active));
        assert_eq!(eviction_source(1001, 1000, 0, 0), None);
    }
}

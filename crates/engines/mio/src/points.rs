//! The engine's named crash points (`PmemPool::crash_point`) that tests pause or crash at,
//! grouped by what the thread reaching them holds. Every one is reached by the background
//! threads (flush, zero-copy merge, lazy copy).

/// Points of a flush, a zero-copy merge outside its node moves, and a lazy copy, where the
/// thread holds no level lock, no version lock and no writer lock: a reader may run to
/// completion while the thread stands there.
pub const UNLOCKED: &[&str] = &[
    "mio.flush.after_copy",
    "mio.flush.after_publish",
    "mio.flush.before_log_free",
    "mio.zerocopy.after_start",
    "mio.zerocopy.before_finish",
    "mio.zerocopy.after_finish",
    "mio.lazycopy.after_copy",
    "mio.lazycopy.after_link",
    "mio.lazycopy.before_free",
    "mio.lazycopy.before_publish",
    "mio.lazycopy.after_publish",
];

/// Points inside a zero-copy node move (`zerocopy.rs`, steps 1-5): the move's level lock
/// is held exclusively and its tables' move counts are odd. A get reads around the move
/// without the lock; a scan waits for the move's end.
pub const NODE_MOVE: &[&str] = &[
    "mio.zerocopy.after_mark",
    "mio.zerocopy.after_unlink_new",
    "mio.zerocopy.after_x_links",
    "mio.zerocopy.after_link_level0",
    "mio.zerocopy.after_link_upper",
    "mio.zerocopy.after_drop_old",
    "mio.zerocopy.after_unmark",
];

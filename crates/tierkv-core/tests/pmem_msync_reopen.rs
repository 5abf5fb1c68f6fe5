//! Msync mode: data written and persisted, root words and the pool's identity survive
//! closing and reopening the pool (in Msync and in the other non-DAX modes).

mod pmem_common;

use pmem_common::config;
use tierkv_core::media::pmem::{DurabilityMode, PmemAllocator, PmemPool};

#[test]
fn persisted_data_survives_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    let value: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
    let (id, base, obj) = {
        let pool = PmemPool::create(&config(&path, 4 << 20, DurabilityMode::Msync)).unwrap();
        let base = pool.data_start();
        pool.write_persist(base + 3, &value).unwrap();
        pool.store_u64(base + 16_384, 0xdead_beef).unwrap();
        pool.persist(base + 16_384, 8).unwrap();
        let a = PmemAllocator::format(pool.clone(), base + 32_768, 2 << 20, 64 << 10).unwrap();
        let obj = a.alloc(300).unwrap();
        pool.write_persist(obj, b"object").unwrap();
        pool.set_root(0, base + 32_768).unwrap();
        pool.set_root(1, obj).unwrap();
        assert!(pool.counters().pmem_persists > 0);
        (pool.pool_id(), base, obj)
    };
    for mode in [
        DurabilityMode::Msync,
        DurabilityMode::Volatile,
        DurabilityMode::Msync,
    ] {
        let pool = PmemPool::open(&config(&path, 0, mode)).unwrap();
        assert_eq!(pool.pool_id(), id);
        assert_eq!(pool.read(base + 3, value.len()).unwrap(), &value[..]);
        assert_eq!(pool.load_u64(base + 16_384).unwrap(), 0xdead_beef);
        let a = PmemAllocator::open(pool.clone(), pool.root(0).unwrap()).unwrap();
        a.check().unwrap();
        assert_eq!(pool.root(1).unwrap(), obj);
        assert_eq!(
            a.iter_allocated().map(|x| x.offset).collect::<Vec<_>>(),
            [obj]
        );
        assert_eq!(pool.read(obj, 6).unwrap(), b"object");
    }
}

#[test]
fn reopened_pool_reports_the_file_size_not_the_config_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    drop(PmemPool::create(&config(&path, 1 << 20, DurabilityMode::Msync)).unwrap());
    let pool = PmemPool::open(&config(&path, 12345, DurabilityMode::Msync)).unwrap();
    assert_eq!(pool.len(), 1 << 20);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
}

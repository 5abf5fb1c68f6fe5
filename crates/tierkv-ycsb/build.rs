//! Builds the RocksDB peer's slowed pmem `Env` (`src/peer/slow_pmem_env.cc`) when the
//! `rocksdb` feature is on, against the headers of the RocksDB that `librocksdb-sys` builds.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "rocksdb")]
    slow_pmem_env();
}

#[cfg(feature = "rocksdb")]
fn slow_pmem_env() {
    const SOURCE: &str = "src/peer/slow_pmem_env.cc";
    println!("cargo:rerun-if-changed={SOURCE}");
    // `librocksdb-sys` (links = "rocksdb") says where its sources are.
    let Ok(sys) = std::env::var("DEP_ROCKSDB_CARGO_MANIFEST_DIR") else {
        panic!("librocksdb-sys did not report its sources (DEP_ROCKSDB_CARGO_MANIFEST_DIR)");
    };
    let include = std::path::Path::new(&sys).join("rocksdb").join("include");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file(SOURCE)
        .include(&include)
        // As librocksdb-sys compiles RocksDB, so the headers' classes have one layout.
        .flag("-std=c++20")
        .define("NDEBUG", Some("1"))
        .define("HAVE_ALIGNED_NEW", None)
        .warnings(true)
        .flag_if_supported("-Wno-unused-parameter");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        build
            .define("OS_LINUX", None)
            .define("ROCKSDB_PLATFORM_POSIX", None)
            .define("ROCKSDB_LIB_IO_POSIX", None);
    }
    build.compile("tierkv_slow_pmem_env");
}

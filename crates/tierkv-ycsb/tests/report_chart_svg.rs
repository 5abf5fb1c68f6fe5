//! A real (tiny) run's `--chart` is a well-formed SVG that names every engine and workload,
//! draws a bar per engine and workload in both panels, and marks what an engine could not
//! run.

mod common;

use tierkv_ycsb::runner::progress::Progress;

#[test]
fn chart_of_a_real_run_is_well_formed_svg_with_every_bar() {
    let tmp = tempfile::tempdir().unwrap();
    let svg_path = tmp.path().join("out.svg");
    let mut args = common::tiny_args(tmp.path(), "dram:btree,dram:hash");
    args.workloads = "load,c,e".into();
    args.chart = Some(svg_path.clone());
    let mut log = Vec::new();
    tierkv_ycsb::run_with(&args, &mut log, Progress::new(false)).unwrap();
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the chart parses as XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let text: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    let text = text.join("\n");
    for needle in [
        "dram:btree",
        "dram:hash",
        "load",
        "c",
        "e",
        "Throughput",
        "p99 latency",
        "n/a",
    ] {
        assert!(text.contains(needle), "{needle:?} is not on the chart");
    }
    let bars = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.children().any(|c| c.has_tag_name("title")))
        .count();
    // 2 panels x 3 workloads x 2 engines, less dram:hash's scans (e) in each panel.
    assert_eq!(bars, 2 * (3 * 2 - 1));
}

//! Chaining and edges of the physical plan.

use riffle::sink::CollectSink;

use crate::env;

#[test]
fn forward_edges_of_equal_parallelism_are_chained() {
    let env = env(2);
    let source = env.from_iter(0..10u64);
    source
        .filter(|x| x % 2 == 0)
        .map(|x| x + 1)
        .name("inc")
        .key_by(|x| *x)
        .process(
            |_: &u64,
             x: u64,
             ctx: &mut riffle::operators::KeyedContext<'_, '_, u64, u64>|
             -> riffle::Result<()> { ctx.emit(x) },
        )
        .map(|x| x)
        .set_parallelism(3)
        .sink(CollectSink::new().0)
        .set_parallelism(3);
    let plan = env.plan().unwrap();
    let vertices: Vec<(String, usize)> = plan
        .vertices
        .iter()
        .map(|v| (v.name.clone(), v.parallelism))
        .collect();
    assert_eq!(
        vertices,
        vec![
            ("Source: collection -> Filter -> inc".to_string(), 2),
            ("KeyedProcess".to_string(), 2),
            ("Map -> Sink: collect".to_string(), 3),
        ]
    );
    let edges: Vec<(usize, usize, &str)> = plan
        .edges
        .iter()
        .map(|e| (e.from, e.to, e.ship.as_str()))
        .collect();
    assert_eq!(edges, vec![(0, 1, "HASH"), (1, 2, "REBALANCE")]);
}

#[test]
fn start_new_chain_and_duplicate_names() {
    let env = env(1);
    env.from_iter(0..3u64)
        .map(|x| x)
        .map(|x| x)
        .start_new_chain()
        .sink(CollectSink::new().0);
    let plan = env.plan().unwrap();
    let names: Vec<&str> = plan.vertices.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        vec!["Source: collection -> Map", "Map (2) -> Sink: collect"]
    );
    assert_eq!(plan.edges[0].ship, "FORWARD");
}

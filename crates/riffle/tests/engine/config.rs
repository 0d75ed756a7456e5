//! Invalid configuration fails at start with an error naming the setting.

use riffle::sink::{CollectSink, FileSink};
use riffle::source::file::FileSource;
use riffle::{EnvConfig, Error, StreamEnv};

fn setting_of(env: &StreamEnv) -> String {
    match env.execute() {
        Err(Error::Config { setting, .. }) => setting,
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

fn job(config: EnvConfig) -> StreamEnv {
    let env = StreamEnv::with_config(config);
    env.from_iter(vec![1u64]).sink(CollectSink::new().0);
    env
}

#[test]
fn bad_settings_are_named() {
    assert_eq!(
        setting_of(&job(EnvConfig {
            parallelism: 0,
            ..EnvConfig::default()
        })),
        "parallelism"
    );
    assert_eq!(
        setting_of(&job(EnvConfig {
            parallelism: 4,
            max_parallelism: 2,
            ..EnvConfig::default()
        })),
        "max_parallelism"
    );
    assert_eq!(
        setting_of(&job(EnvConfig {
            channel_capacity: 0,
            ..EnvConfig::default()
        })),
        "channel_capacity"
    );
}

#[test]
fn operator_parallelism_is_checked() {
    let env = StreamEnv::new();
    env.from_iter(vec![1u64])
        .map(|x| x)
        .name("double")
        .set_parallelism(0)
        .sink(CollectSink::new().0);
    assert_eq!(setting_of(&env), "parallelism of `double`");
}

#[test]
fn unreadable_paths_are_named() {
    let env = StreamEnv::new();
    env.from_source(FileSource::<u64>::json("/definitely/not/here").setting_name("--input"))
        .sink(CollectSink::new().0);
    assert_eq!(setting_of(&env), "--input");

    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "x").unwrap();
    let env = StreamEnv::new();
    env.from_iter(vec![1u64])
        .sink(FileSink::new(blocker.join("out")).setting_name("--output"));
    assert_eq!(setting_of(&env), "--output");
}

#[test]
fn misuse_of_the_api_is_reported_at_execute() {
    let env = StreamEnv::new();
    let s = env.from_iter(vec![1u64]);
    s.rebalance().name("nope").sink(CollectSink::new().0);
    match env.execute() {
        Err(Error::Graph(message)) => assert!(
            message.contains("`name` applies to an operator"),
            "{message}"
        ),
        other => panic!("expected a graph error, got {other:?}"),
    }
    assert!(matches!(StreamEnv::new().execute(), Err(Error::Graph(_))));
}

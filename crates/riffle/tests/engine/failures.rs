//! A failing or panicking user function fails the job with an error naming the operator and
//! subtask; nothing hangs.

use riffle::Error;
use riffle::sink::CollectSink;
use riffle_clicks::ClicksConfig;

use crate::{env, run};

#[test]
fn an_error_in_a_user_function_names_the_operator_and_subtask() {
    let env = env(1);
    let (sink, _) = CollectSink::new();
    env.from_iter(vec!["1".to_string(), "x".into(), "3".into()])
        .try_map(|s| s.parse::<u32>())
        .name("parse")
        .sink(sink);
    match run(&env) {
        Err(Error::Operator {
            operator,
            subtask,
            source,
        }) => {
            assert_eq!((operator.as_str(), subtask), ("parse", 0));
            assert_eq!(source.to_string(), "invalid digit found in string");
        }
        other => panic!("expected an operator error, got {other:?}"),
    }
}

#[test]
fn an_operator_that_cannot_be_built_fails_the_job_naming_it_and_its_subtask() {
    use riffle::operators::{FromContext, Identity, OperatorContext};
    for panics in [false, true] {
        let env = env(2);
        let (sink, _) = CollectSink::new();
        env.from_iter(0..10u64)
            .transform("picky", move || {
                FromContext(move |ctx: &OperatorContext| {
                    if ctx.subtask == 1 {
                        if panics {
                            panic!("subtask 1 refuses to start");
                        }
                        return Err(Error::user("subtask 1 refuses to start"));
                    }
                    Ok(Identity::<u64>::new())
                })
            })
            .set_parallelism(2)
            .sink(sink);
        match run(&env) {
            Err(Error::Operator {
                operator,
                subtask,
                source,
            }) if !panics => {
                assert_eq!((operator.as_str(), subtask), ("picky", 1));
                assert_eq!(source.to_string(), "subtask 1 refuses to start");
            }
            Err(Error::Panic {
                operator,
                subtask,
                message,
            }) if panics => {
                assert_eq!((operator.as_str(), subtask), ("picky", 1));
                assert_eq!(message, "subtask 1 refuses to start");
            }
            other => panic!("expected the build's failure, got {other:?}"),
        }
    }
}

#[test]
fn a_panic_in_a_user_function_fails_the_job_downstream_of_a_shuffle() {
    let env = env(2);
    let (sink, _) = CollectSink::new();
    env.from_iter(0..1000u64)
        .key_by(|x| *x)
        .process(
            |_: &u64,
             x: u64,
             ctx: &mut riffle::operators::KeyedContext<'_, '_, u64, u64>|
             -> riffle::Result<()> {
                if x == 777 {
                    panic!("record 777 is cursed");
                }
                ctx.emit(x)
            },
        )
        .name("cursed")
        .sink(sink);
    match run(&env) {
        Err(Error::Panic {
            operator, message, ..
        }) => {
            assert_eq!(operator, "cursed");
            assert_eq!(message, "record 777 is cursed");
        }
        other => panic!("expected a panic error, got {other:?}"),
    }
}

#[test]
fn a_failure_in_a_sink_stops_an_unbounded_job() {
    let env = env(2);
    let (sink, _) = CollectSink::new();
    env.from_source(riffle_clicks::source(ClicksConfig::default()))
        .map(|c| c.user_id)
        .rebalance()
        .try_map(|id| {
            if id % 1000 == 7 {
                Err(format!("user {id} rejected"))
            } else {
                Ok(id)
            }
        })
        .name("validate")
        .sink(sink);
    match run(&env) {
        Err(Error::Operator {
            operator, source, ..
        }) => {
            assert_eq!(operator, "validate");
            assert!(source.to_string().ends_with("rejected"));
        }
        other => panic!("expected an operator error, got {other:?}"),
    }
}

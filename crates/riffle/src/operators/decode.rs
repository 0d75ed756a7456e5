//! Decoding operators: raw payloads (JSON text) to typed records, under a bad-record policy.
//!
//! A payload that does not decode never fails silently: it is counted in `bad_records` and, by
//! the default policy, sent to the operator's dead-letter side output (see
//! [`DataStream::dead_letters`](crate::DataStream::dead_letters)).

use std::marker::PhantomData;

use crate::bad_records::{
    BadInput, BadRecordHandler, BadRecordPolicy, DEAD_LETTER_TAG, DeadLetter,
};
use crate::error::Result;
use crate::operators::{BuildOperator, Collector, Operator, OperatorContext, OutputTag};
use crate::record::{Data, Record};

/// A decoder of one JSON payload of its own (one that knows the schema, say), given the payload
/// as text: a payload that is not UTF-8 is left to `serde_json` (and its error).
pub type JsonDecoder<Out> = fn(&str) -> serde_json::Result<Out>;

/// Parses JSON payloads into records of type `Out`: built on each subtask into an
/// [`OpenParseJson`] with the subtask's bad-record handler.
pub struct ParseJson<In, Out> {
    policy: BadRecordPolicy,
    decoder: Option<JsonDecoder<Out>>,
    _type: PhantomData<fn(In)>,
}

/// A [`ParseJson`] built on its subtask.
pub struct OpenParseJson<In, Out> {
    decoder: Option<JsonDecoder<Out>>,
    handler: BadRecordHandler,
    ctx: OperatorContext,
    dead_letters: OutputTag<DeadLetter>,
    seen: u64,
    buffer: Vec<Record<Out>>,
    _type: PhantomData<fn(In)>,
}

impl<In, Out> ParseJson<In, Out> {
    /// A parser applying `policy` to payloads that do not decode.
    pub fn new(policy: BadRecordPolicy) -> Self {
        ParseJson {
            policy,
            decoder: None,
            _type: PhantomData,
        }
    }

    /// A parser decoding with `decoder` instead of `serde_json`'s derived `Deserialize`.
    pub fn with_decoder(policy: BadRecordPolicy, decoder: JsonDecoder<Out>) -> Self {
        ParseJson {
            decoder: Some(decoder),
            ..ParseJson::new(policy)
        }
    }
}

impl<In: Data + AsRef<[u8]>, Out: Data> BuildOperator for ParseJson<In, Out> {
    type Operator = OpenParseJson<In, Out>;

    fn build(self, ctx: &OperatorContext) -> Result<Self::Operator> {
        Ok(OpenParseJson {
            decoder: self.decoder,
            handler: BadRecordHandler::new(self.policy, &ctx.name),
            ctx: ctx.clone(),
            dead_letters: OutputTag::new(DEAD_LETTER_TAG),
            seen: 0,
            buffer: Vec::new(),
            _type: PhantomData,
        })
    }
}

/// Parses one payload; text that is known to be UTF-8 skips the validation.
fn parse<In: AsRef<[u8]> + 'static, Out: Data>(
    payload: &In,
    decoder: Option<JsonDecoder<Out>>,
) -> serde_json::Result<Out> {
    let text = match (payload as &dyn std::any::Any).downcast_ref::<String>() {
        Some(text) => Some(text.as_str()),
        None if decoder.is_some() => std::str::from_utf8(payload.as_ref()).ok(),
        None => None,
    };
    match (text, decoder) {
        (Some(text), Some(decode)) => decode(text),
        (Some(text), None) => serde_json::from_str(text),
        (None, _) => serde_json::from_slice(payload.as_ref()),
    }
}

impl<In: Data + AsRef<[u8]>, Out: Data> Operator for OpenParseJson<In, Out> {
    type In = In;
    type Out = Out;

    fn process(&mut self, batch: &mut Vec<Record<In>>, out: &mut Collector<'_, Out>) -> Result<()> {
        let (handler, ctx) = (&mut self.handler, &self.ctx);
        for record in batch.drain(..) {
            self.seen += 1;
            match parse::<In, Out>(&record.value, self.decoder) {
                Ok(value) => self.buffer.push(Record {
                    value,
                    timestamp: record.timestamp,
                }),
                Err(error) => {
                    let bad = BadInput {
                        position: format!("record {}", self.seen),
                        error: error.to_string(),
                        payload: String::from_utf8_lossy(record.value.as_ref()).into_owned(),
                    };
                    let split = format!("subtask {}", ctx.subtask);
                    let tag = &self.dead_letters;
                    handler.handle(std::iter::once(bad), &split, &ctx.metrics, |letter| {
                        out.side_output(tag, letter).map(|_| ())
                    })?;
                }
            }
        }
        out.emit_batch(&mut self.buffer)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::OperatorHarness;
    use riffle_clicks::Click;

    fn harness() -> OperatorHarness<Vec<u8>, Click> {
        let tag = OutputTag::<DeadLetter>::new(DEAD_LETTER_TAG);
        OperatorHarness::builder(ParseJson::<Vec<u8>, Click>::new(
            BadRecordPolicy::DeadLetter,
        ))
        .side_output(&tag)
        .build()
        .unwrap()
    }

    fn dead_letters(h: &mut OperatorHarness<Vec<u8>, Click>) -> Vec<DeadLetter> {
        let tag = OutputTag::<DeadLetter>::new(DEAD_LETTER_TAG);
        h.take_side_output(&tag)
            .into_iter()
            .map(|r| r.value)
            .collect()
    }

    fn any_click() -> impl Strategy<Value = Click> {
        (
            any::<u64>(),
            ".{0,20}",
            ".{0,20}",
            "[0-9.]{0,15}",
            any::<i64>(),
        )
            .prop_map(|(user_id, url, user_agent, ip, event_time)| Click {
                user_id,
                url: url.into(),
                user_agent: user_agent.into(),
                ip: ip.into(),
                event_time,
            })
    }

    /// A payload: arbitrary bytes, or a click's JSON with some bytes damaged.
    fn any_payload() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..200),
            (
                any_click(),
                proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4)
            )
                .prop_map(|(click, damage)| {
                    let mut json = serde_json::to_vec(&click).unwrap();
                    for (at, byte) in damage {
                        let at = at % json.len();
                        json[at] = byte;
                    }
                    json
                }),
        ]
    }

    proptest! {
        #![proptest_config(crate::util::fuzz_config(256))]

        /// Any click round-trips through its JSON, all of `i64` event times included.
        #[test]
        fn the_click_decoder_reads_back_every_click(click in any_click()) {
            let mut h = harness();
            h.process_untimed(serde_json::to_vec(&click).unwrap()).unwrap();
            prop_assert_eq!(h.take_values(), vec![click]);
            prop_assert!(dead_letters(&mut h).is_empty());
        }

        /// Any bytes: no panic, no failed job; each payload is a click (exactly what serde_json
        /// reads) or a dead letter with the payload and a reason. Nothing lost.
        #[test]
        fn the_click_decoder_survives_any_bytes(
            payloads in proptest::collection::vec(any_payload(), 1..8),
        ) {
            let mut h = harness();
            h.process_records(payloads.iter().cloned().map(Record::untimed).collect()).unwrap();
            let clicks = h.take_values();
            let letters = dead_letters(&mut h);
            prop_assert_eq!(clicks.len() + letters.len(), payloads.len());
            let mut clicks = clicks.into_iter();
            let mut letters = letters.into_iter();
            for payload in &payloads {
                match serde_json::from_slice::<Click>(payload) {
                    Ok(click) => prop_assert_eq!(clicks.next(), Some(click)),
                    Err(_) => {
                        let letter = letters.next().unwrap();
                        prop_assert_eq!(letter.payload, String::from_utf8_lossy(payload));
                        prop_assert!(!letter.error.is_empty());
                    }
                }
            }
        }
    }
}

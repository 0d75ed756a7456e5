//! Decoding operators: raw payloads (JSON text) to typed records, under a bad-record policy.
//!
//! A payload that does not decode never fails silently: it is counted in `bad_records` and, by
//! the default policy, sent to the operator's dead-letter side output (see
//! [`DataStream::dead_letters`](crate::DataStream::dead_letters)).

use std::marker::PhantomData;

use crate::api::DEAD_LETTER_TAG;
use crate::error::Result;
use crate::operators::{Collector, Operator, OperatorContext, OutputTag};
use crate::record::{Data, Record};
use crate::source::{BadInput, BadRecordHandler, BadRecordPolicy, DeadLetter};

/// Parses JSON payloads into records of type `Out`.
pub struct ParseJson<In, Out> {
    policy: BadRecordPolicy,
    handler: Option<(BadRecordHandler, OperatorContext)>,
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
            handler: None,
            dead_letters: OutputTag::new(DEAD_LETTER_TAG),
            seen: 0,
            buffer: Vec::new(),
            _type: PhantomData,
        }
    }
}

/// Parses one payload; text that is known to be UTF-8 skips the validation.
fn parse<In: AsRef<[u8]> + 'static, Out: Data>(payload: &In) -> serde_json::Result<Out> {
    match (payload as &dyn std::any::Any).downcast_ref::<String>() {
        Some(text) => serde_json::from_str(text),
        None => serde_json::from_slice(payload.as_ref()),
    }
}

impl<In: Data + AsRef<[u8]>, Out: Data> Operator for ParseJson<In, Out> {
    type In = In;
    type Out = Out;

    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.handler = Some((BadRecordHandler::new(self.policy, &ctx.name), ctx.clone()));
        Ok(())
    }

    fn process(&mut self, batch: &mut Vec<Record<In>>, out: &mut Collector<'_, Out>) -> Result<()> {
        let (handler, ctx) = self.handler.as_mut().expect("opened");
        for record in batch.drain(..) {
            self.seen += 1;
            match parse::<In, Out>(&record.value) {
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

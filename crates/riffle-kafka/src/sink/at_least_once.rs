//! At-least-once: an idempotent producer flushed and checked at every checkpoint barrier, so
//! that what a completed checkpoint covers is in Kafka (a replay after a failure writes again).

use riffle::record::{Data, Record};
use riffle::sink::{Finalizer, SinkWriter};

use super::Encoder;
use super::producer::KafkaProducer;

pub(super) struct AtLeastOnceWriter<T> {
    pub(super) producer: KafkaProducer,
    pub(super) encoder: Encoder<T>,
}

impl<T: Data> SinkWriter<T> for AtLeastOnceWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> riffle::Result<()> {
        self.producer.send_batch(&mut self.encoder, batch)
    }

    fn flush(&mut self) -> riffle::Result<()> {
        self.producer.serve()
    }

    fn pre_commit(&mut self, _checkpoint_id: u64) -> riffle::Result<Option<Vec<u8>>> {
        self.producer.flush().map(|()| None)
    }

    fn close(&mut self) -> riffle::Result<Option<Finalizer>> {
        self.producer.flush().map(|()| None)
    }
}

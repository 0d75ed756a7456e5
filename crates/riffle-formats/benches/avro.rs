//! The cost of the Avro format per record, beside JSON's, on one core: Nexmark-like bids
//! encoded and decoded with serde (JSON: serde_json; Avro: the registry's wire format, the
//! writer schema cached after the first record), and decoded with a reader schema (Avro's
//! resolution of the writer's schema to the job's, through a generic value). Then the seed's
//! clicks (`riffle-clicks`' generator): JSON as the clicks job decodes it (`Click::from_json`)
//! and with serde_json, against Avro.
//!
//! ```sh
//! scripts/schema-registry.sh start && eval "$(scripts/schema-registry.sh env)"
//! cargo bench -p riffle-formats --bench avro
//! ```

use std::hint::black_box;
use std::time::Instant;

use riffle_formats::{AvroDecoder, AvroEncoder, AvroSchema, Schema, SchemaRegistry};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, AvroSchema)]
struct Bid {
    auction: i64,
    bidder: i64,
    price: i64,
    channel: String,
    url: String,
    date_time: i64,
    extra: String,
}

/// An older version of `Bid`, without `extra` (its schema is `BID_V1`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct BidV1 {
    auction: i64,
    bidder: i64,
    price: i64,
    channel: String,
    url: String,
    date_time: i64,
}

const BID_V1: &str = r#"{"type":"record","name":"Bid","fields":[
    {"name":"auction","type":"long"},{"name":"bidder","type":"long"},{"name":"price","type":"long"},
    {"name":"channel","type":"string"},{"name":"url","type":"string"},
    {"name":"date_time","type":"long"}]}"#;

/// `Bid` with a default for `extra`: a reader of `BidV1`'s records.
const BID_READER: &str = r#"{"type":"record","name":"Bid","fields":[
    {"name":"auction","type":"long"},{"name":"bidder","type":"long"},{"name":"price","type":"long"},
    {"name":"channel","type":"string"},{"name":"url","type":"string"},
    {"name":"date_time","type":"long"},{"name":"extra","type":"string","default":""}]}"#;

/// The seed's click in Avro (Avro has no unsigned integers: the user id is a `long`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, AvroSchema)]
struct AvroClick {
    user_id: i64,
    url: String,
    user_agent: String,
    ip: String,
    event_time: i64,
}

const RECORDS: usize = 1_000_000;

fn bids() -> Vec<Bid> {
    (0..RECORDS as i64)
        .map(|n| Bid {
            auction: 1000 + n % 997,
            bidder: 2000 + n % 10_007,
            price: 100 + n * 7 % 100_000,
            channel: ["Google", "Facebook", "Baidu", "Apple"][n as usize % 4].to_string(),
            url: format!(
                "https://www.nexmark.com/item.htm?query=1&channel_id={}",
                n % 10_000
            ),
            date_time: 1_700_000_000_000 + n,
            extra: String::new(),
        })
        .collect()
}

/// Runs `work` over every record and prints records per second and bytes per record.
fn measure(name: &str, bytes: usize, mut work: impl FnMut(usize)) {
    // Warm up, then the timed pass.
    for i in 0..RECORDS / 10 {
        work(i);
    }
    let started = Instant::now();
    for i in 0..RECORDS {
        work(i);
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{name:<40} {:>12.0} records/s {:>8.0} ns/record {:>6.1} bytes/record",
        RECORDS as f64 / seconds,
        seconds * 1e9 / RECORDS as f64,
        bytes as f64 / RECORDS as f64
    );
}

fn main() {
    let url = std::env::var("RIFFLE_SCHEMA_REGISTRY_URL")
        .expect("RIFFLE_SCHEMA_REGISTRY_URL: start `scripts/schema-registry.sh` and eval its env");
    let registry = SchemaRegistry::new(&url).unwrap();
    let subject = format!("bench-bids-{}-value", std::process::id());
    let encoder = AvroEncoder::confluent(&registry, &subject, Bid::get_schema()).unwrap();
    let bids = bids();

    let json: Vec<Vec<u8>> = bids
        .iter()
        .map(|b| serde_json::to_vec(b).unwrap())
        .collect();
    let avro: Vec<Vec<u8>> = bids
        .iter()
        .map(|b| {
            let mut out = Vec::new();
            encoder.encode(b, &mut out).unwrap();
            out
        })
        .collect();
    let json_bytes = json.iter().map(Vec::len).sum();
    let avro_bytes = avro.iter().map(Vec::len).sum();

    let mut out = Vec::with_capacity(256);
    measure("encode JSON (serde_json)", json_bytes, |i| {
        out.clear();
        serde_json::to_writer(&mut out, &bids[i]).unwrap();
        black_box(&out);
    });
    measure("encode Avro (registry wire format)", avro_bytes, |i| {
        out.clear();
        encoder.encode(&bids[i], &mut out).unwrap();
        black_box(&out);
    });
    measure("decode JSON (serde_json)", json_bytes, |i| {
        black_box(serde_json::from_slice::<Bid>(&json[i]).unwrap());
    });
    let decoder = AvroDecoder::confluent(&registry);
    measure("decode Avro (as written)", avro_bytes, |i| {
        black_box(decoder.decode::<Bid>(&avro[i]).unwrap());
    });
    let resolving = AvroDecoder::confluent(&registry).reader_schema(Bid::get_schema());
    measure(
        "decode Avro (resolved to a reader schema)",
        avro_bytes,
        |i| {
            black_box(resolving.decode::<Bid>(&avro[i]).unwrap());
        },
    );
    let generic = AvroDecoder::confluent(&registry);
    measure("decode Avro (generic value)", avro_bytes, |i| {
        black_box(generic.decode_value(&avro[i]).unwrap());
    });
    // An older version's records, resolved to the current reader schema (a field added).
    let old = AvroEncoder::confluent(
        &registry,
        &format!("bench-bids-v1-{}-value", std::process::id()),
        Schema::parse_str(BID_V1).unwrap(),
    )
    .unwrap();
    let v1: Vec<Vec<u8>> = bids
        .iter()
        .map(|b| {
            let mut out = Vec::new();
            let v1 = BidV1 {
                auction: b.auction,
                bidder: b.bidder,
                price: b.price,
                channel: b.channel.clone(),
                url: b.url.clone(),
                date_time: b.date_time,
            };
            old.encode(&v1, &mut out).unwrap();
            out
        })
        .collect();
    let evolving =
        AvroDecoder::confluent(&registry).reader_schema(Schema::parse_str(BID_READER).unwrap());
    measure(
        "decode Avro (an older version, resolved)",
        v1.iter().map(Vec::len).sum(),
        |i| {
            black_box(evolving.decode::<Bid>(&v1[i]).unwrap());
        },
    );

    clicks(&registry);
}

/// The seed's clicks: JSON (the clicks job's decoder, and serde_json) against Avro.
fn clicks(registry: &SchemaRegistry) {
    use riffle::source::datagen::Generator;
    use riffle_clicks::{Click, ClickGenerator, ClicksConfig};
    let generator = ClickGenerator::new(ClicksConfig::default());
    let clicks: Vec<Click> = (0..RECORDS as u64).map(|i| generator.generate(i)).collect();
    let json: Vec<Vec<u8>> = clicks
        .iter()
        .map(|c| serde_json::to_vec(c).unwrap())
        .collect();
    let encoder = AvroEncoder::confluent(
        registry,
        &format!("bench-clicks-{}-value", std::process::id()),
        AvroClick::get_schema(),
    )
    .unwrap();
    let avro: Vec<Vec<u8>> = clicks
        .iter()
        .map(|c| {
            let mut out = Vec::new();
            let click = AvroClick {
                user_id: c.user_id as i64,
                url: c.url.to_string(),
                user_agent: c.user_agent.to_string(),
                ip: c.ip.to_string(),
                event_time: c.event_time,
            };
            encoder.encode(&click, &mut out).unwrap();
            out
        })
        .collect();
    let json_bytes = json.iter().map(Vec::len).sum();
    let avro_bytes = avro.iter().map(Vec::len).sum();
    measure("clicks: decode JSON (Click::from_json)", json_bytes, |i| {
        black_box(Click::from_json(&json[i]).unwrap());
    });
    measure("clicks: decode JSON (serde_json)", json_bytes, |i| {
        black_box(serde_json::from_slice::<Click>(&json[i]).unwrap());
    });
    let decoder = AvroDecoder::confluent(registry);
    measure("clicks: decode Avro (as written)", avro_bytes, |i| {
        black_box(decoder.decode::<AvroClick>(&avro[i]).unwrap());
    });
}

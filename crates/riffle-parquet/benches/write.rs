//! The cost of writing Parquet per row, beside JSON lines, on one core: 1M Nexmark-like bids
//! (7 columns: 4 integers, 2 strings, a timestamp) through the part writer the sink uses
//! (columns buffered, row groups of 64 MiB, the footer at the end), with Snappy, Zstandard and
//! no compression; JSON lines with serde_json into a buffered file for comparison. Rows per
//! second and bytes per row.
//!
//! ```sh
//! cargo bench -p riffle-parquet --bench write
//! ```

use std::fs::File;
use std::io::{BufWriter, Write};
use std::time::Instant;

use riffle::sink::partitioned::PartWriter;
use riffle_parquet::{Cell, Column, ColumnType, Compression, ParquetFormat};
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
struct Bid {
    auction: i64,
    bidder: i64,
    price: i64,
    channel: String,
    url: String,
    date_time: i64,
    extra: i64,
}

const ROWS: usize = 1_000_000;

fn bids() -> Vec<Bid> {
    (0..ROWS as i64)
        .map(|n| Bid {
            auction: 1000 + n % 997,
            bidder: 2000 + n % 10_007,
            price: 100 + n * 7 % 100_000,
            channel: ["Google", "Facebook", "Baidu", "Apple"][n as usize % 4].to_string(),
            url: format!(
                "https://www.nexmark.com/item.htm?query=1&channel_id={}",
                n * 7919 % 100_000
            ),
            date_time: 1_768_435_200_000 + n * 5,
            extra: n % 13,
        })
        .collect()
}

fn format(compression: Compression) -> ParquetFormat<Bid> {
    ParquetFormat::new(
        vec![
            Column::new("auction", ColumnType::Int64).required(),
            Column::new("bidder", ColumnType::Int64).required(),
            Column::new("price", ColumnType::Int64).required(),
            Column::new("channel", ColumnType::String),
            Column::new("url", ColumnType::String),
            Column::new("date_time", ColumnType::TimestampMillis { utc: false }),
            Column::new("extra", ColumnType::Int32),
        ],
        |b: &Bid, row| {
            row.push(Cell::Int(b.auction))?;
            row.push(Cell::Int(b.bidder))?;
            row.push(Cell::Int(b.price))?;
            row.push(Cell::Str(&b.channel))?;
            row.push(Cell::Str(&b.url))?;
            row.push(Cell::Int(b.date_time))?;
            row.push(Cell::Int(b.extra))
        },
    )
    .unwrap()
    .compression(compression)
}

fn report(name: &str, seconds: f64, bytes: u64) {
    println!(
        "{name:<28} {:>6.2} M rows/s  {:>6.0} ns/row  {:>5.1} bytes/row",
        ROWS as f64 / seconds / 1e6,
        seconds * 1e9 / ROWS as f64,
        bytes as f64 / ROWS as f64
    );
}

fn main() {
    let bids = bids();
    let dir = tempfile::tempdir().unwrap();
    for round in 0..2 {
        // The first round warms up; the second is reported.
        let show = round == 1;
        for (name, compression) in [
            ("parquet (snappy)", Compression::Snappy),
            ("parquet (zstd)", Compression::Zstd),
            ("parquet (uncompressed)", Compression::Uncompressed),
        ] {
            let path = dir.path().join(format!("{name}.parquet"));
            let started = Instant::now();
            let mut writer: Box<dyn PartWriter<Bid>> = Box::new(
                format(compression)
                    .writer(File::create(&path).unwrap())
                    .unwrap(),
            );
            for bid in &bids {
                writer.write(bid).unwrap();
            }
            writer.finish().unwrap().sync_all().unwrap();
            let seconds = started.elapsed().as_secs_f64();
            if show {
                report(name, seconds, std::fs::metadata(&path).unwrap().len());
            }
        }
        let path = dir.path().join("bids.jsonl");
        let started = Instant::now();
        let mut out = BufWriter::with_capacity(1 << 16, File::create(&path).unwrap());
        let mut line = Vec::with_capacity(256);
        for bid in &bids {
            line.clear();
            serde_json::to_writer(&mut line, bid).unwrap();
            line.push(b'\n');
            out.write_all(&line).unwrap();
        }
        out.into_inner().unwrap().sync_all().unwrap();
        let seconds = started.elapsed().as_secs_f64();
        if show {
            report(
                "json lines (serde_json)",
                seconds,
                std::fs::metadata(&path).unwrap().len(),
            );
        }
    }
}

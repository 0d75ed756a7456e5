//! Issue 31's CDC acceptance: two PostgreSQL tables changed by a workload (inserts, updates
//! that move rows, deletes, one transaction touching many rows) → `riffle sql` (`postgres-cdc`
//! sources, a join of the two changelogs and a running aggregate per key) → a PostgreSQL
//! table (`jdbc`, upserts, exactly-once); Riffle killed with SIGKILL mid-stream and restored
//! from its latest checkpoint while the workload goes on. At the end the sink table equals the
//! query PostgreSQL computes itself over the source tables.

use crate::{Job, psql_test_server as psql, start_sql_job, wait_while_running};

#[test]
fn a_join_of_two_cdc_tables_aggregated_into_postgres_survives_sigkill() {
    let name = format!("cdcpipe_{}", std::process::id());
    let (orders, customers, totals) = (
        format!("{name}_orders"),
        format!("{name}_customers"),
        format!("{name}_totals"),
    );
    psql(&format!(
        "CREATE TABLE {customers} (id bigint PRIMARY KEY, region text);
         CREATE TABLE {orders} (id bigint PRIMARY KEY, customer_id bigint, amount numeric(10, 2));
         CREATE TABLE {totals} (region text PRIMARY KEY, orders bigint, amount numeric(14, 2));
         INSERT INTO {customers} SELECT i, 'r' || (i % 5) FROM generate_series(1, 200) i;
         INSERT INTO {orders} SELECT i, i % 200 + 1, (i % 89) + 0.5 FROM generate_series(1, 5000) i;"
    ));
    let url = std::env::var("RIFFLE_POSTGRES_URL").unwrap();
    // postgresql://user@host:port/db
    let rest = url
        .strip_prefix("postgresql://")
        .expect("a postgresql:// URL");
    let (user, rest) = rest.split_once('@').unwrap();
    let (address, database) = rest.split_once('/').unwrap();
    let (host, port) = address.split_once(':').unwrap();
    let cdc = |table: &str| {
        format!(
            "'connector' = 'postgres-cdc', 'hostname' = '{host}', 'port' = '{port}',
             'username' = '{user}', 'database-name' = '{database}', 'schema-name' = 'public',
             'table-name' = '{table}', 'slot.name' = '{table}'"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.sql");
    std::fs::write(
        &job,
        format!(
            "CREATE TABLE customers (id BIGINT, region STRING, PRIMARY KEY (id) NOT ENFORCED)
               WITH ({});
             CREATE TABLE orders (id BIGINT, customer_id BIGINT, amount DECIMAL(10, 2),
               PRIMARY KEY (id) NOT ENFORCED) WITH ({});
             CREATE TABLE totals (region STRING, orders BIGINT, amount DECIMAL(14, 2),
               PRIMARY KEY (region) NOT ENFORCED)
             WITH ('connector' = 'jdbc', 'url' = 'jdbc:{url}', 'table-name' = '{totals}',
                   'sink.delivery-guarantee' = 'exactly-once');
             INSERT INTO totals
             SELECT c.region, COUNT(*), SUM(o.amount)
             FROM orders AS o JOIN customers AS c ON o.customer_id = c.id
             GROUP BY c.region;",
            cdc(&customers),
            cdc(&orders)
        ),
    )
    .unwrap();
    let start = |restore: bool| -> Job { start_sql_job(&job, dir.path(), restore) };
    let expected = format!(
        "SELECT c.region, count(*), sum(o.amount) FROM {orders} o JOIN {customers} c ON o.customer_id = c.id GROUP BY c.region"
    );
    let differing = || -> i64 {
        psql(&format!(
            "SELECT count(*) FROM (({expected} EXCEPT TABLE {totals}) UNION ALL (TABLE {totals} EXCEPT {expected})) d"
        ))
        .trim()
        .parse()
        .unwrap()
    };
    let wait_equal =
        |what: &str, job: &mut Job| wait_while_running(what, job, dir.path(), &|| differing() == 0);

    let mut job = start(false);
    wait_equal("the snapshot's totals", &mut job);
    // Changes stream in; Riffle is killed in the middle of them.
    psql(&format!(
        "UPDATE {orders} SET amount = amount + 1 WHERE id % 3 = 0;
         DELETE FROM {orders} WHERE id % 11 = 0;
         INSERT INTO {orders} SELECT i, i % 200 + 1, 2.25 FROM generate_series(5001, 5600) i;"
    ));
    job.kill();
    psql(&format!(
        "UPDATE {customers} SET region = 'moved' WHERE id % 7 = 0;
         BEGIN;
         UPDATE {orders} SET customer_id = customer_id % 50 + 1 WHERE id % 4 = 0;
         DELETE FROM {customers} WHERE id % 13 = 0;
         INSERT INTO {customers} VALUES (1000, 'new');
         UPDATE {orders} SET customer_id = 1000 WHERE id % 17 = 0;
         COMMIT;"
    ));
    let mut job = start(true);
    wait_equal("the totals after a restore", &mut job);
    // More changes, a kill right after they are applied, a restore, the last changes.
    psql(&format!("DELETE FROM {orders} WHERE id % 5 = 0;"));
    wait_equal("the totals after deletes", &mut job);
    job.kill();
    let mut job = start(true);
    psql(&format!(
        "UPDATE {customers} SET region = 'r0' WHERE region = 'moved';
         INSERT INTO {orders} SELECT i, 1000, 9.99 FROM generate_series(6001, 6100) i;"
    ));
    wait_equal("the final totals", &mut job);
    job.kill();
    assert_eq!(differing(), 0);
    // The killed job's replication connections may not be gone yet: end their walsenders and
    // wait until no slot is active before dropping the slots.
    let slots = format!("slot_name IN ('{orders}', '{customers}')");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let active = psql(&format!(
            "SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE {slots} AND active_pid IS NOT NULL;"
        ));
        if active.trim() == "0" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the replication slots stay active"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    psql(&format!(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE {slots};
         DROP PUBLICATION IF EXISTS riffle_{orders}, riffle_{customers};
         DROP TABLE {orders}, {customers}, {totals};"
    ));
}

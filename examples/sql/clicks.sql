-- The seed's clicks pipeline in SQL: bots dropped, clicks enriched with their country, clicks
-- per user and 1-minute tumbling window, and the clicks too late for their window written to
-- their own table (Riffle's extension to Flink's SQL). `riffle demo --lateness-secs 0` writes
-- the same files from the same input:
--
--   riffle sql -f examples/sql/clicks.sql --define INPUT=clicks.jsonl --define OUTPUT=out
--
-- `is_bot` and `ip_country` are `riffle demo`'s bot filter and IP-prefix table, registered by
-- `riffle sql`.

CREATE TABLE clicks (
    user_id BIGINT,
    url STRING,
    user_agent STRING,
    ip STRING,
    event_time TIMESTAMP(3),
    WATERMARK FOR event_time AS event_time - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${INPUT}', 'format' = 'json');

CREATE TABLE agg_clicks (
    user_id BIGINT,
    window_start TIMESTAMP(3),
    window_end TIMESTAMP(3),
    `count` BIGINT
) WITH ('connector' = 'filesystem', 'path' = '${OUTPUT}/agg-clicks', 'format' = 'json');

CREATE TABLE late_clicks (
    user_id BIGINT,
    url STRING,
    ip STRING,
    country STRING,
    event_time TIMESTAMP(3)
) WITH ('connector' = 'filesystem', 'path' = '${OUTPUT}/late-clicks', 'format' = 'json');

CREATE VIEW human_clicks AS
SELECT user_id, url, ip, ip_country(ip) AS country, event_time
FROM clicks
WHERE NOT is_bot(user_agent);

SET 'riffle.window.late-rows-table' = 'late_clicks';

INSERT INTO agg_clicks
SELECT user_id, window_start, window_end, COUNT(*) AS `count`
FROM TABLE(TUMBLE(TABLE human_clicks, DESCRIPTOR(event_time), INTERVAL '1' MINUTE))
GROUP BY user_id, window_start, window_end;

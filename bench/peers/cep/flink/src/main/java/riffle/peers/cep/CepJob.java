package riffle.peers.cep;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.annotation.JsonPropertyOrder;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.MapperFeature;
import com.fasterxml.jackson.databind.ObjectReader;
import com.fasterxml.jackson.databind.ObjectWriter;
import com.fasterxml.jackson.databind.json.JsonMapper;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichFlatMapFunction;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.serialization.Encoder;
import org.apache.flink.cep.CEP;
import org.apache.flink.cep.functions.PatternProcessFunction;
import org.apache.flink.cep.functions.TimedOutPartialMatchHandler;
import org.apache.flink.cep.pattern.Pattern;
import org.apache.flink.cep.pattern.conditions.SimpleCondition;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.connector.file.sink.FileSink;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.filesystem.OutputFileConfig;
import org.apache.flink.streaming.api.functions.sink.filesystem.bucketassigners.BasePathBucketAssigner;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Riffle's `demo cep` (crates/riffle-cli/src/demos/cep.rs) as a FlinkCEP job on a local
 * MiniCluster: courier events as JSON lines through FileSource + TextLineInputFormat, event time
 * from `event_time` with bounded out-of-orderness, keyed by order, two patterns in event time
 * (after-match strategy NO_SKIP, FlinkCEP's default), their alerts as JSON lines through a
 * row-format FileSink into OUTPUT/alerts/, late events into OUTPUT/late-events/. Bounded: the job
 * ends at the end of the input, whose final watermark times out every partial match left. No
 * checkpoints, object reuse on.
 *
 * <ul>
 *   <li>late delivery: placed, followedBy picked_up, followedBy delivered, within the promised
 *       minutes of the placement; a complete match writes nothing, each timed-out partial match
 *       one alert: `late_delivery` (it holds a picked_up: that event's courier and time) or
 *       `not_picked_up` (only the placement), due at placed + promised.
 *   <li>courier silent: ping, notFollowedBy (ping or delivered), within the silence minutes;
 *       each match (the window ran out with no next ping or delivery) is a `courier_silent`
 *       alert, due at ping + silence.
 * </ul>
 *
 * <pre>
 * CepJob --input PATH --output DIR [-p N] [--state-backend hashmap|rocksdb]
 *        [--promised-minutes 60] [--silence-minutes 10] [--out-of-orderness-secs 60]
 *        [--set key=value ...]
 * </pre>
 *
 * `--set` passes a Flink configuration option (applied after the job's own, so it can override
 * them), e.g. `--set pipeline.auto-watermark-interval=1s` or
 * `--set state.backend.rocksdb.timer-service.factory=HEAP`; the default is Flink's defaults.
 *
 * Prints a summary line and one `FLINK_TIMING key=value ...` line at the end (as the clicks peer's
 * ClicksJob): JVM start, main start, first record parsed, last close of a pattern operator, job
 * end (wall ms), process CPU at those points, records read, GC time.
 */
public final class CepJob {
    static final AtomicLong FIRST_RECORD_MS = new AtomicLong();
    static final AtomicLong FIRST_RECORD_CPU_NS = new AtomicLong();
    /**
     * Wall time (ms) and process CPU (ns) when the last subtask of the two pattern operators
     * closed: every event processed, every partial match timed out by the final watermark; the
     * sinks still flush and commit their files after it.
     */
    static final AtomicLong LAST_CLOSE_MS = new AtomicLong();
    static final AtomicLong LAST_CLOSE_CPU_NS = new AtomicLong();

    static synchronized void closed() {
        LAST_CLOSE_MS.set(System.currentTimeMillis());
        LAST_CLOSE_CPU_NS.set(processCpuNs());
    }

    public static void main(String[] args) throws Exception {
        long mainStartMs = System.currentTimeMillis();
        String input = null;
        String output = null;
        int parallelism = 1;
        String backend = "hashmap";
        long promisedMinutes = 60;
        long silenceMinutes = 10;
        double outOfOrdernessSecs = 60;
        Map<String, String> extra = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            String flag = args[i];
            String value = i + 1 < args.length ? args[i + 1] : null;
            if (value == null) {
                usage(flag + " needs a value");
            }
            switch (flag) {
                case "--input" -> input = value;
                case "--output" -> output = value;
                case "-p", "--parallelism" -> parallelism = Integer.parseInt(value);
                case "--state-backend" -> backend = value;
                case "--promised-minutes" -> promisedMinutes = Long.parseLong(value);
                case "--silence-minutes" -> silenceMinutes = Long.parseLong(value);
                case "--out-of-orderness-secs" -> outOfOrdernessSecs = Double.parseDouble(value);
                case "--set" -> {
                    int eq = value.indexOf('=');
                    if (eq <= 0) {
                        usage("--set takes key=value");
                    }
                    extra.put(value.substring(0, eq).trim(), value.substring(eq + 1).trim());
                }
                default -> usage("unknown flag " + flag);
            }
            i++;
        }
        if (input == null || output == null) {
            usage("--input and --output are required");
        }
        if (!backend.equals("hashmap") && !backend.equals("rocksdb")) {
            usage("--state-backend is hashmap or rocksdb");
        }
        if (promisedMinutes < 1 || silenceMinutes < 1) {
            usage("--promised-minutes and --silence-minutes must be at least 1");
        }
        final long promisedMs = promisedMinutes * 60_000L;
        final long silenceMs = silenceMinutes * 60_000L;

        Configuration conf = new Configuration();
        conf.set(ExecutionOptions.RUNTIME_MODE, RuntimeExecutionMode.STREAMING);
        conf.set(PipelineOptions.OBJECT_REUSE, true);
        conf.set(StateBackendOptions.STATE_BACKEND, backend);
        conf.addAll(Configuration.fromMap(extra));
        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);

        FileSource<String> source =
                FileSource.forRecordStreamFormat(new TextLineInputFormat(), new Path(input))
                        .build();
        // Riffle assigns event time and watermarks in the source, to every decoded event: here
        // right after parsing, chained to the source.
        DataStream<CourierEvent> events =
                env.fromSource(source, WatermarkStrategy.noWatermarks(), "courier events")
                        .flatMap(new ParseEvent()).name("parse")
                        .assignTimestampsAndWatermarks(
                                WatermarkStrategy.<CourierEvent>forBoundedOutOfOrderness(
                                                Duration.ofMillis(
                                                        Math.round(outOfOrdernessSecs * 1000)))
                                        .withTimestampAssigner((e, ts) -> e.eventTime))
                        .name("event time");
        KeyedStream<CourierEvent, Long> byOrder = events.keyBy(e -> e.orderId);

        OutputTag<CourierEvent> late = new OutputTag<>("late-events") {};
        OutputTag<Alert> timedOut = new OutputTag<>("late-delivery-timeouts") {};

        Pattern<CourierEvent, CourierEvent> delivery =
                Pattern.<CourierEvent>begin("placed")
                        .where(new KindIs(Kind.PLACED))
                        .followedBy("picked_up")
                        .where(new KindIs(Kind.PICKED_UP))
                        .followedBy("delivered")
                        .where(new KindIs(Kind.DELIVERED))
                        .within(Duration.ofMillis(promisedMs));
        SingleOutputStreamOperator<Alert> deliveries =
                CEP.pattern(byOrder, delivery)
                        .inEventTime()
                        .sideOutputLateData(late)
                        .process(new LateDelivery(promisedMs, timedOut))
                        .name("late delivery")
                        .uid("late-delivery");

        Pattern<CourierEvent, CourierEvent> silence =
                Pattern.<CourierEvent>begin("ping")
                        .where(new KindIs(Kind.PING))
                        .notFollowedBy("next")
                        .where(new KindIs(Kind.PING, Kind.DELIVERED))
                        .within(Duration.ofMillis(silenceMs));
        SingleOutputStreamOperator<Alert> silences =
                CEP.pattern(byOrder, silence)
                        .inEventTime()
                        .sideOutputLateData(late)
                        .process(new CourierSilent(silenceMs))
                        .name("courier silent")
                        .uid("courier-silent");

        // Complete deliveries write nothing (the main output of `deliveries` stays empty); the
        // timed-out partial matches are the alerts.
        deliveries.getSideOutput(timedOut)
                .union(silences)
                .map(new CountAlerts()).name("count alerts")
                .sinkTo(jsonSink(output + "/alerts", "part"))
                .name("write alerts");
        // Both patterns see the same events and watermarks, hence the same late events: written
        // once, as Riffle does (the silence pattern's are not consumed).
        deliveries.getSideOutput(late)
                .map(new CountLate()).name("count late")
                .sinkTo(jsonSink(output + "/late-events", "part"))
                .name("write late events");

        JobExecutionResult result = env.execute("flink-cep-couriers");
        long endMs = System.currentTimeMillis();
        long endCpuNs = processCpuNs();
        long read = counter(result, "read");
        long gcMs = 0;
        long gcCount = 0;
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            gcMs += Math.max(0, gc.getCollectionTime());
            gcCount += Math.max(0, gc.getCollectionCount());
        }
        System.out.printf(
                Locale.ROOT,
                "flink cep: read %d, bad %d, late_delivery %d, not_picked_up %d, courier_silent %d,"
                        + " late events %d, parallelism %d, state %s, promised %d min,"
                        + " silence %d min%s%n",
                read, counter(result, "bad"), counter(result, "late_delivery"),
                counter(result, "not_picked_up"), counter(result, "courier_silent"),
                counter(result, "late"), parallelism, backend, promisedMinutes, silenceMinutes,
                extra.isEmpty() ? "" : ", settings " + extra);
        System.out.printf(
                Locale.ROOT,
                "FLINK_TIMING jvm_start_ms=%d main_start_ms=%d first_record_ms=%d last_close_ms=%d"
                        + " end_ms=%d net_runtime_ms=%d first_record_cpu_ns=%d last_close_cpu_ns=%d"
                        + " end_cpu_ns=%d read=%d gc_ms=%d gc_count=%d%n",
                ManagementFactory.getRuntimeMXBean().getStartTime(), mainStartMs,
                FIRST_RECORD_MS.get(), LAST_CLOSE_MS.get(), endMs, result.getNetRuntime(),
                FIRST_RECORD_CPU_NS.get(), LAST_CLOSE_CPU_NS.get(), endCpuNs, read, gcMs, gcCount);
    }

    private static long counter(JobExecutionResult result, String name) {
        Object value = result.getAccumulatorResult(name);
        return value == null ? 0 : ((Number) value).longValue();
    }

    private static void usage(String problem) {
        System.err.println(problem);
        System.err.println(
                "usage: CepJob --input PATH --output DIR [-p N] [--state-backend hashmap|rocksdb]"
                        + " [--promised-minutes 60] [--silence-minutes 10]"
                        + " [--out-of-orderness-secs 60] [--set key=value ...]");
        System.exit(2);
    }

    static long processCpuNs() {
        return ((com.sun.management.OperatingSystemMXBean)
                        ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    // --- the data ---------------------------------------------------------------------------

    /** What happened to an order (serde's snake_case names of Riffle's `Kind`). */
    public enum Kind {
        @JsonProperty("placed") PLACED,
        @JsonProperty("picked_up") PICKED_UP,
        @JsonProperty("ping") PING,
        @JsonProperty("delivered") DELIVERED
    }

    /**
     * A courier event (a Flink POJO). The ids start at -1 and the time at Long.MIN_VALUE so that
     * a line missing one is recognised and skipped (serde refuses it).
     */
    @JsonPropertyOrder({"order_id", "courier_id", "kind", "event_time"})
    public static final class CourierEvent {
        @JsonProperty("order_id")
        public long orderId = -1;

        @JsonProperty("courier_id")
        public long courierId = -1;

        @JsonProperty("kind")
        public Kind kind;

        @JsonProperty("event_time")
        public long eventTime = Long.MIN_VALUE;

        public CourierEvent() {}

        @Override
        public String toString() {
            return "CourierEvent{order " + orderId + ", courier " + courierId + ", " + kind
                    + " at " + eventTime + "}";
        }
    }

    /** An alert, with Riffle's field names and order (serde_json: no spaces). */
    @JsonPropertyOrder({"alert", "order_id", "courier_id", "since", "at"})
    public static final class Alert {
        @JsonProperty("alert")
        public String alert;

        @JsonProperty("order_id")
        public long orderId;

        @JsonProperty("courier_id")
        public long courierId;

        @JsonProperty("since")
        public String since;

        @JsonProperty("at")
        public String at;

        public Alert() {}

        static Alert of(String alert, long orderId, long courierId, long since, long at) {
            Alert a = new Alert();
            a.alert = alert;
            a.orderId = orderId;
            a.courierId = courierId;
            a.since = clock(since);
            a.at = clock(at);
            return a;
        }
    }

    /** Riffle's `clock_time`: the UTC time of day of epoch ms `ts` as HH:MM:SS. */
    static String clock(long ts) {
        if (ts == Long.MAX_VALUE) {
            return "end";
        }
        if (ts <= 0) {
            return "-";
        }
        long s = Math.floorMod(Math.floorDiv(ts, 1000L), 86_400L);
        return String.format(Locale.ROOT, "%02d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
    }

    // --- the functions ----------------------------------------------------------------------

    /** Decodes a line into an event; lines that are not events are counted and skipped. */
    static final class ParseEvent extends RichFlatMapFunction<String, CourierEvent> {
        private transient ObjectReader reader;
        private transient LongCounter read;
        private transient LongCounter bad;
        private transient boolean seen;

        @Override
        public void open(OpenContext openContext) {
            reader = JsonMapper.builder()
                    .disable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES)
                    .enable(DeserializationFeature.FAIL_ON_NULL_FOR_PRIMITIVES)
                    .disable(MapperFeature.ALLOW_COERCION_OF_SCALARS)
                    .build()
                    .readerFor(CourierEvent.class);
            read = getRuntimeContext().getLongCounter("read");
            bad = getRuntimeContext().getLongCounter("bad");
        }

        @Override
        public void flatMap(String line, Collector<CourierEvent> out) {
            if (!seen) {
                seen = true;
                long now = System.currentTimeMillis();
                if (FIRST_RECORD_MS.compareAndSet(0, now)) {
                    FIRST_RECORD_CPU_NS.set(processCpuNs());
                }
            }
            if (line.isBlank()) {
                return; // Riffle's file source skips blank lines
            }
            CourierEvent event;
            try {
                event = reader.readValue(line);
            } catch (IOException e) {
                bad.add(1);
                return;
            }
            if (event == null || event.kind == null || event.orderId < 0 || event.courierId < 0
                    || event.eventTime == Long.MIN_VALUE) {
                bad.add(1);
                return;
            }
            read.add(1);
            out.collect(event);
        }
    }

    /** The event is of one of these kinds. */
    static final class KindIs extends SimpleCondition<CourierEvent> {
        private final Kind a;
        private final Kind b;

        KindIs(Kind kind) {
            this(kind, kind);
        }

        KindIs(Kind a, Kind b) {
            this.a = a;
            this.b = b;
        }

        @Override
        public boolean filter(CourierEvent e) {
            return e.kind == a || e.kind == b;
        }
    }

    /**
     * The late-delivery pattern: a complete match (delivered within the promised time) writes
     * nothing; a timed-out partial match is the alert, to the side output `timedOut`.
     */
    static final class LateDelivery extends PatternProcessFunction<CourierEvent, Alert>
            implements TimedOutPartialMatchHandler<CourierEvent> {
        private final long promisedMs;
        private final OutputTag<Alert> timedOut;

        LateDelivery(long promisedMs, OutputTag<Alert> timedOut) {
            this.promisedMs = promisedMs;
            this.timedOut = timedOut;
        }

        @Override
        public void processMatch(
                Map<String, List<CourierEvent>> match, Context ctx, Collector<Alert> out) {
            // delivered in time
        }

        @Override
        public void processTimedOutMatch(Map<String, List<CourierEvent>> match, Context ctx) {
            CourierEvent placed = match.get("placed").get(0);
            long due = placed.eventTime + promisedMs;
            List<CourierEvent> picked = match.get("picked_up");
            Alert alert;
            if (picked != null && !picked.isEmpty()) {
                CourierEvent p = picked.get(0);
                alert = Alert.of("late_delivery", p.orderId, p.courierId, p.eventTime, due);
            } else {
                alert = Alert.of("not_picked_up", placed.orderId, placed.courierId,
                        placed.eventTime, due);
            }
            ctx.output(timedOut, alert);
        }

        @Override
        public void close() {
            closed();
        }
    }

    /** The silence pattern: each match (no ping or delivery in time) is the alert. */
    static final class CourierSilent extends PatternProcessFunction<CourierEvent, Alert> {
        private final long silenceMs;

        CourierSilent(long silenceMs) {
            this.silenceMs = silenceMs;
        }

        @Override
        public void processMatch(
                Map<String, List<CourierEvent>> match, Context ctx, Collector<Alert> out) {
            CourierEvent ping = match.get("ping").get(0);
            out.collect(Alert.of("courier_silent", ping.orderId, ping.courierId, ping.eventTime,
                    ping.eventTime + silenceMs));
        }

        @Override
        public void close() {
            closed();
        }
    }

    static final class CountAlerts extends RichMapFunction<Alert, Alert> {
        private transient LongCounter lateDelivery;
        private transient LongCounter notPickedUp;
        private transient LongCounter silent;

        @Override
        public void open(OpenContext openContext) {
            lateDelivery = getRuntimeContext().getLongCounter("late_delivery");
            notPickedUp = getRuntimeContext().getLongCounter("not_picked_up");
            silent = getRuntimeContext().getLongCounter("courier_silent");
        }

        @Override
        public Alert map(Alert a) {
            switch (a.alert) {
                case "late_delivery" -> lateDelivery.add(1);
                case "not_picked_up" -> notPickedUp.add(1);
                default -> silent.add(1);
            }
            return a;
        }
    }

    static final class CountLate extends RichMapFunction<CourierEvent, CourierEvent> {
        private transient LongCounter late;

        @Override
        public void open(OpenContext openContext) {
            late = getRuntimeContext().getLongCounter("late");
        }

        @Override
        public CourierEvent map(CourierEvent e) {
            late.add(1);
            return e;
        }
    }

    // --- the sink ---------------------------------------------------------------------------

    /** A row-format file sink writing `T` as JSON lines into `dir` (no bucket subdirectories). */
    static <T> FileSink<T> jsonSink(String dir, String prefix) {
        return FileSink.forRowFormat(new Path(dir), new JsonLines<T>())
                .withBucketAssigner(new BasePathBucketAssigner<>())
                .withOutputFileConfig(
                        OutputFileConfig.builder()
                                .withPartPrefix(prefix)
                                .withPartSuffix(".jsonl")
                                .build())
                .build();
    }

    /** One JSON document and a newline per element, handed to the part file in one write. */
    static final class JsonLines<T> implements Encoder<T> {
        private transient ObjectWriter writer;
        private transient ByteArrayOutputStream buffer;

        @Override
        public void encode(T element, OutputStream stream) throws IOException {
            if (writer == null) {
                writer = JsonMapper.builder().build().writer();
                buffer = new ByteArrayOutputStream(256);
            }
            buffer.reset();
            writer.writeValue(buffer, element);
            buffer.write('\n');
            buffer.writeTo(stream);
        }
    }
}

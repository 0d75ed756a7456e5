package riffle.peers.nexmarksql;

import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.ExplainDetail;
import org.apache.flink.table.api.StatementSet;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableResult;

/**
 * Runs a SQL script (DDL, views, functions, SET, INSERT INTO) through Flink SQL on a local
 * MiniCluster: a TableEnvironment in streaming mode, the hashmap state backend, no checkpoints
 * unless asked, parallelism from the arguments. Every INSERT of the script runs as one job (a
 * statement set, as {@code riffle sql} runs a script); the program waits for it to finish.
 *
 * <pre>
 * java -Xmx2g -XX:+UseG1GC -cp JAR:CLASSPATH riffle.peers.nexmarksql.NexmarkSql \
 *   --file script.sql [-p 1] [--checkpoint-interval-ms 500] [--state-backend hashmap] \
 *   [--set key=value ...] [--explain]
 * </pre>
 *
 * Prints one line {@code FLINK_TIMING jvm_start_ms=.. submit_ms=.. end_ms=.. net_runtime_ms=..
 * submit_cpu_ns=.. end_cpu_ns=..} to standard output (times epoch ms; CPU = this process's CPU
 * time so far, all threads).
 */
public final class NexmarkSql {

  public static void main(String[] args) throws Exception {
    String file = null;
    int parallelism = 1;
    long checkpointMs = 0;
    String stateBackend = "hashmap";
    boolean explain = false;
    List<String[]> sets = new ArrayList<>();
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--file":
        case "-f":
          file = args[++i];
          break;
        case "-p":
        case "--parallelism":
          parallelism = Integer.parseInt(args[++i]);
          break;
        case "--checkpoint-interval-ms":
          checkpointMs = Long.parseLong(args[++i]);
          break;
        case "--state-backend":
          stateBackend = args[++i];
          break;
        case "--set": {
          String kv = args[++i];
          int eq = kv.indexOf('=');
          if (eq < 0) {
            throw new IllegalArgumentException("--set wants key=value, got " + kv);
          }
          sets.add(new String[] {kv.substring(0, eq), kv.substring(eq + 1)});
          break;
        }
        case "--explain":
          explain = true;
          break;
        default:
          throw new IllegalArgumentException("unknown argument " + args[i]);
      }
    }
    if (file == null) {
      throw new IllegalArgumentException("--file SCRIPT.sql is required");
    }

    Configuration conf = new Configuration();
    conf.setString("execution.runtime-mode", "streaming");
    conf.setString("parallelism.default", Integer.toString(parallelism));
    conf.setString("state.backend.type", stateBackend);
    if (checkpointMs > 0) {
      conf.setString("execution.checkpointing.interval", checkpointMs + " ms");
    }
    for (String[] kv : sets) {
      conf.setString(kv[0], kv[1]);
    }
    EnvironmentSettings settings =
        EnvironmentSettings.newInstance().inStreamingMode().withConfiguration(conf).build();
    TableEnvironment tEnv = TableEnvironment.create(settings);

    String script = Files.readString(Path.of(file), StandardCharsets.UTF_8);
    StatementSet inserts = tEnv.createStatementSet();
    int insertCount = 0;
    for (String statement : splitStatements(script)) {
      String head = firstWord(statement);
      if (head.equals("INSERT")) {
        inserts.addInsertSql(statement);
        insertCount++;
      } else {
        tEnv.executeSql(statement);
      }
    }
    if (insertCount == 0) {
      throw new IllegalArgumentException(file + ": no INSERT INTO statement");
    }
    if (explain) {
      System.out.println(inserts.explain(ExplainDetail.CHANGELOG_MODE));
      return;
    }

    long jvmStart = ManagementFactory.getRuntimeMXBean().getStartTime();
    long submitMs = System.currentTimeMillis();
    long submitCpu = processCpuNanos();
    TableResult result = inserts.execute();
    result.await();
    long endMs = System.currentTimeMillis();
    long endCpu = processCpuNanos();
    long netRuntime = -1;
    if (result.getJobClient().isPresent()) {
      JobExecutionResult jr = result.getJobClient().get().getJobExecutionResult().get();
      netRuntime = jr.getNetRuntime();
    }
    System.out.printf(
        Locale.ROOT,
        "FLINK_TIMING jvm_start_ms=%d submit_ms=%d end_ms=%d net_runtime_ms=%d submit_cpu_ns=%d"
            + " end_cpu_ns=%d%n",
        jvmStart, submitMs, endMs, netRuntime, submitCpu, endCpu);
    System.out.flush();
    // The MiniCluster's non-daemon threads may linger after the job: end the process.
    System.exit(0);
  }

  private static long processCpuNanos() {
    java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
    if (os instanceof com.sun.management.OperatingSystemMXBean) {
      return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
    }
    return -1;
  }

  private static String firstWord(String statement) {
    String s = statement.stripLeading();
    int end = 0;
    while (end < s.length() && Character.isLetter(s.charAt(end))) {
      end++;
    }
    return s.substring(0, end).toUpperCase(Locale.ROOT);
  }

  /**
   * The statements of a script: {@code --} comments (outside quotes) removed, split at each
   * {@code ;} that ends a line (outside quotes), blank statements dropped.
   */
  static List<String> splitStatements(String script) {
    List<String> out = new ArrayList<>();
    StringBuilder current = new StringBuilder();
    boolean inString = false; // '...'
    boolean inIdent = false; // `...`
    for (String line : script.split("\r?\n", -1)) {
      StringBuilder kept = new StringBuilder();
      for (int i = 0; i < line.length(); i++) {
        char ch = line.charAt(i);
        if (!inString && !inIdent && ch == '-' && i + 1 < line.length() && line.charAt(i + 1) == '-') {
          break; // a comment to the end of the line
        }
        if (!inIdent && ch == '\'') {
          inString = !inString; // '' inside a string toggles twice: stays inside
        } else if (!inString && ch == '`') {
          inIdent = !inIdent;
        }
        kept.append(ch);
      }
      String text = kept.toString().stripTrailing();
      if (!inString && !inIdent && text.endsWith(";")) {
        current.append(text, 0, text.length() - 1);
        add(out, current);
      } else {
        current.append(text).append('\n');
      }
    }
    add(out, current);
    return out;
  }

  private static void add(List<String> out, StringBuilder current) {
    String s = current.toString().strip();
    if (!s.isEmpty()) {
      out.add(s);
    }
    current.setLength(0);
  }
}

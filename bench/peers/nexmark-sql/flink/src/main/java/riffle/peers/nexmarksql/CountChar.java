package riffle.peers.nexmarksql;

import org.apache.flink.table.functions.ScalarFunction;

/**
 * Nexmark q14's {@code count_char(text, c)}: how often the first character of {@code c} occurs in
 * {@code text} ({@code NULL} when either is {@code NULL}), as Riffle's built-in {@code count_char}.
 */
public class CountChar extends ScalarFunction {
  public Long eval(String text, String c) {
    if (text == null || c == null) {
      return null;
    }
    if (c.isEmpty()) {
      return 0L;
    }
    int wanted = c.codePointAt(0);
    long n = 0;
    for (int i = 0; i < text.length(); ) {
      int cp = text.codePointAt(i);
      if (cp == wanted) {
        n++;
      }
      i += Character.charCount(cp);
    }
    return n;
  }
}

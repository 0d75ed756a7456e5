// Loads a job's web UI in Debian's headless Chromium (driven by playwright-core), waits until
// the UI has decided whether the job's event time follows the wall clock and the watermark chart
// has points, and prints how the UI shows the watermark lag (the counter, its note, the chart's
// caption, each operator's cell) as JSON.
//
//   node watermark.mjs <url>
//
// Chromium: $RIFFLE_CHROMIUM or /usr/bin/chromium (scripts/install-deps.sh installs it).
import { chromium } from "playwright-core";

const [url] = process.argv.slice(2);
if (!url) {
  console.error("usage: node watermark.mjs <url>");
  process.exit(2);
}
const browser = await chromium.launch({
  executablePath: process.env.RIFFLE_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => document.body.dataset.loaded === "true", null, { timeout: 20000 });
  // Every operator's cell says which event time it is; the chart has a line.
  await page.waitForFunction(() => {
    const cells = [...document.querySelectorAll("#operators tbody .watermark-lag")];
    const line = document.querySelector("#chart-watermark polyline");
    return cells.length > 0 && cells.every((c) => c.dataset.eventTime) &&
      document.getElementById("watermark-lag").textContent !== "–" &&
      line && line.getAttribute("points").split(" ").filter(Boolean).length >= 2;
  }, null, { timeout: 30000 });
  const shown = await page.evaluate(() => ({
    counter: document.getElementById("watermark-lag").textContent,
    counterTitle: document.getElementById("watermark-lag").title,
    note: document.getElementById("event-time").hidden ? null : document.getElementById("event-time").textContent,
    caption: document.getElementById("chart-watermark-caption").textContent,
    operators: [...document.querySelectorAll("#operators tbody tr")].map((r) => {
      const cell = r.querySelector(".watermark-lag");
      return { name: r.dataset.operator, lag: cell.textContent, title: cell.title, eventTime: cell.dataset.eventTime };
    }),
  }));
  shown.errors = errors;
  console.log(JSON.stringify(shown));
} finally {
  await browser.close();
}

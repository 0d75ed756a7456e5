// Loads a job's web UI in Debian's headless Chromium (driven by playwright-core), waits until the
// UI names a bottleneck, saves a screenshot, clicks "Savepoint" and prints what the page shows
// (and what the click answered) as JSON.
//
//   node ui.mjs <url> <screenshot.png>
//
// Chromium: $RIFFLE_CHROMIUM or /usr/bin/chromium (scripts/install-deps.sh installs it).
import { chromium } from "playwright-core";

const [url, screenshot] = process.argv.slice(2);
if (!url || !screenshot) {
  console.error("usage: node ui.mjs <url> <screenshot.png>");
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
  await page.waitForFunction(() => document.querySelector('#graph .vertex[data-bottleneck="true"]'), null, { timeout: 30000 });
  // A few more refreshes so that the charts have points.
  await page.waitForTimeout(2500);
  const shown = await page.evaluate(() => ({
    title: document.title,
    status: document.getElementById("job-status").textContent,
    vertices: [...document.querySelectorAll("#graph .vertex")].map((g) => ({
      name: g.dataset.name,
      backpressure: g.dataset.backpressure,
      bottleneck: g.dataset.bottleneck === "true",
      fill: getComputedStyle(g.querySelector("rect")).fill,
    })),
    bottleneck: document.getElementById("bottleneck").hidden ? null : {
      operator: document.getElementById("bottleneck").dataset.operator,
      text: document.getElementById("bottleneck").textContent,
    },
    operators: [...document.querySelectorAll("#operators tbody tr")].map((r) => r.dataset.operator),
    chartPoints: [...document.querySelectorAll(".chart polyline")].map((p) => p.getAttribute("points").split(" ").filter(Boolean).length),
    edges: document.querySelectorAll("#graph .edge").length,
    latency: document.getElementById("latency").textContent,
  }));
  await page.screenshot({ path: screenshot, fullPage: true });
  await page.click("#btn-savepoint");
  await page.waitForFunction(() => /Savepoint (done|failed)/.test(document.getElementById("message").textContent), null, { timeout: 30000 });
  shown.savepointMessage = await page.evaluate(() => document.getElementById("message").textContent);
  shown.errors = errors;
  console.log(JSON.stringify(shown));
} finally {
  await browser.close();
}

// The admin page in a real headless browser (Debian's chromium, driven by
// playwright-core): sign in, a rule with a bad limit shows the validation
// error inline, fixed it is listed, its counters move while requests come in,
// it is switched to shadow; the page never breaks its own CSP. A screenshot
// goes to $SCREENSHOT. Environment: ADMIN_URL, TOKEN, DOMAIN, CHROMIUM,
// PYTHON, GRPC, TLS_CA, SCREENSHOT.
import { spawn } from "node:child_process";
import { chromium } from "playwright-core";

const env = (k) => { const v = process.env[k]; if (!v) throw new Error(k + " is not set: run through scripts/test-admin"); return v; };
const [url, token, domain] = [env("ADMIN_URL"), env("TOKEN"), env("DOMAIN")];
const STEP_MS = 10_000;

const browser = await chromium.launch({
  executablePath: env("CHROMIUM"),
  // Root in CI: chromium's sandbox needs a user namespace it cannot have.
  args: process.getuid && process.getuid() === 0 ? ["--no-sandbox"] : [],
});
let driver = null;
const failures = [];
try {
  // The admin listener's certificate is the test CA's, which this browser
  // profile does not know: TLS itself is tested with curl and grpcio.
  const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_MS);
  page.on("console", (m) => { if (m.type() === "error" && !/status of 4\d\d/.test(m.text())) failures.push("console: " + m.text()); });
  page.on("pageerror", (e) => failures.push("page error: " + e.message));
  const step = (s) => console.log("page: " + s);

  await page.goto(url + "/admin/");
  step("sign in");
  await page.fill("#token", "not-a-token-at-all-0000");
  await page.click("#login");
  await page.waitForFunction(() => document.querySelector("#login-error").textContent.includes("401"));
  await page.fill("#token", token);
  await page.click("#login");
  await page.waitForSelector("#main-view:not([hidden])");
  if (await page.evaluate(() => document.cookie) !== "") throw new Error("the page set a cookie");

  step("open domain " + domain);
  await page.fill("#domain-name", domain);
  await page.click("#open-domain");
  await page.waitForSelector('#rules tr[data-rule="base"]');

  step("a rule with a bad limit: the error shows inline");
  await page.click("#new-rule");
  await page.fill("#f-name", "per-user");
  await page.fill("#f-limit", "5/fortnight");
  await page.fill("#f-key", "user");
  await page.fill("#f-match", '{"path": "/api"}');
  await page.click("#save");
  await page.waitForFunction(() => document.querySelector('.field-error[data-field="limit"]').textContent.includes("fortnight"));
  if (await page.$('#rules tr[data-rule="per-user"]')) throw new Error("an invalid rule was listed");

  step("fixed, it is listed");
  await page.fill("#f-limit", "2/second");
  await page.click("#save");
  await page.waitForSelector('#rules tr[data-rule="per-user"]');
  await page.waitForSelector("#editor", { state: "hidden" });

  step("counters move under requests");
  driver = spawn(env("PYTHON"), [new URL("drive.py", import.meta.url).pathname, env("GRPC"), env("TLS_CA"), domain, "alice", "30", "20"], { stdio: "inherit" });
  const row = '#rules tr[data-rule="per-user"]';
  await page.waitForFunction((row) => {
    const n = (c) => parseFloat(document.querySelector(row + " ." + c).textContent) || 0;
    return n("rate-allowed") > 0 && n("rate-denied") > 0;
  }, row, { timeout: 15_000 });

  step("switch it to shadow");
  await page.click(row + " button.toggle-mode");
  await page.waitForFunction((row) => document.querySelector(row + " .mode").textContent === "shadow", row);
  await page.waitForFunction((row) => (parseFloat(document.querySelector(row + " .rate-shadow").textContent) || 0) > 0, row, { timeout: 15_000 });
  await page.waitForSelector('#audit tr[data-action="replace"]');
  await page.waitForTimeout(1500); // a few more chart points for the screenshot
  await page.screenshot({ path: env("SCREENSHOT"), fullPage: true });
  step("screenshot " + env("SCREENSHOT"));
} catch (e) {
  failures.push(String(e && e.stack || e));
} finally {
  if (driver) driver.kill("SIGTERM");
  await browser.close();
}
if (failures.length) {
  console.error(failures.join("\n"));
  process.exit(1);
}
console.log("page: all passed");

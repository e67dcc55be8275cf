package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
)

// startAISDKExample builds and runs examples/ai-sdk-chat, as make dev
// does, in front of the API at api, and returns the page's URL.
func startAISDKExample(t *testing.T, api string) string {
	t.Helper()
	dir := filepath.Join(proctest.ModuleDir(t), "examples", "ai-sdk-chat")
	_, err := os.Stat(filepath.Join(dir, "node_modules", "ai", "package.json"))
	require.NoError(t, err, "the example's AI SDK is missing: `make ai-sdk` installs it (it needs Node 20 and npm)")
	bin := proctest.Build(t, "github.com/tollgate/tollgate/examples/ai-sdk-chat")()
	addr := proctest.FreeAddr(t)
	cmd := exec.Command(bin, "-addr", addr, "-api", api, "-dir", dir)
	log := filepath.Join(t.TempDir(), "ai-sdk-chat.log")
	out, err := os.Create(log)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("--- ai-sdk-chat log ---\n%s", b)
		}
	})
	url := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, waitFor, 20*time.Millisecond, "the example serves its page")
	return url
}

// exampleCall selects the example page's card of the call of tool.
func exampleCall(tool string) string { return fmt.Sprintf(`[data-testid="call"][data-tool=%q]`, tool) }

// TestTheAISDKExamplePageApprovesACallThePersonSees drives the example
// page (examples/ai-sdk-chat, the AI SDK's own client in the browser) in
// headless Chromium: a person types, sees the calls wait with their
// preview, reloads and sees them ask again, approves one, declines the
// other with a reason, and sees the results and the answer.
//
// Serial, as every test that drives Chromium (docs/testing.md).
func TestTheAISDKExamplePageApprovesACallThePersonSees(t *testing.T) {
	st := newStack(t)
	page := startAISDKExample(t, st.api.URL)
	b := newBrowser(t)
	b.do(chromedp.Navigate(page + "/"))
	b.do(
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="query"]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid="query"]`), "tidy up, please"),
		chromedp.Click(chromedp.CSS(`[data-testid="send"]`)),
	)
	asking := func(tool string) string {
		return exampleCall(tool) + `[data-state="approval-requested"] [data-testid="approve"]`
	}
	b.do(chromedp.WaitVisible(chromedp.CSS(asking("Write"))), chromedp.WaitVisible(chromedp.CSS(asking("Bash"))))
	preview := eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(exampleCall("Write")+` [data-testid="preview"]`)))
	require.Contains(t, preview, "You asked: tidy up, please", "the call shows what it will do")
	require.Contains(t, eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(exampleCall("Bash")+` [data-testid="tool-input"]`))), `"command": "ls -la"`)
	b.screenshot("ai-sdk-example-waiting")

	// A reload resumes the turn: the calls ask again.
	conv := eval[string](b, `location.hash.slice(1)`)
	require.NotEmpty(t, conv)
	b.do(chromedp.Reload())
	b.do(chromedp.WaitVisible(chromedp.CSS(asking("Write"))), chromedp.WaitVisible(chromedp.CSS(asking("Bash"))))
	require.Equal(t, conv, eval[string](b, `document.querySelector('[data-testid="conversation"]').textContent`))

	b.do(chromedp.Click(chromedp.CSS(asking("Write"))))
	b.waitUntil(count(exampleCall("Write")+` [data-testid="approval-actions"]:not([hidden])`) + ` === 0`)
	b.do(
		chromedp.SendKeys(chromedp.CSS(exampleCall("Bash")+` [data-testid="decline-reason"]`), "not on a Friday"),
		chromedp.Click(chromedp.CSS(exampleCall("Bash")+` [data-testid="decline"]`)),
	)
	b.do(chromedp.WaitVisible(chromedp.CSS(`[data-testid="finish"][data-reason="stop"]`)))
	b.waitUntil(count(exampleCall("Write")+`[data-state="output-available"]`) + ` === 1`)
	b.waitUntil(count(exampleCall("Bash")+`[data-state="output-denied"]`) + ` === 1`)
	b.waitUntil(count(exampleCall("Read")+`[data-state="output-available"]`) + ` === 1`)
	require.Contains(t, eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(exampleCall("Bash")+` [data-testid="decision"]`))), "not on a Friday")
	answer := eval[string](b, `[...document.querySelectorAll('[data-testid="answer"]')].map((e) => e.textContent).join("|")`)
	require.Contains(t, answer, `Bash was declined, with the reason "not on a Friday"`)
	b.screenshot("ai-sdk-example-finished")

	note, err := os.ReadFile(filepath.Join(st.workspace, scripted.DemoNotePath))
	require.NoError(t, err, "the approved Write ran")
	require.Contains(t, string(note), "You asked: tidy up, please")
	require.Equal(t, "approve", auditOf(t, st, conv, "Write").Decision)
}

// TestTheAISDKExamplePinsTheTestedSDK keeps the example on the version of
// the `ai` package the tests drive (api/testdata/aisdk).
func TestTheAISDKExamplePinsTheTestedSDK(t *testing.T) {
	t.Parallel()
	version := func(lock string) string {
		b, err := os.ReadFile(lock)
		require.NoError(t, err)
		var l struct {
			Packages map[string]struct {
				Version string `json:"version"`
			} `json:"packages"`
		}
		require.NoError(t, json.Unmarshal(b, &l))
		return l.Packages["node_modules/ai"].Version
	}
	tested := version(filepath.Join(aisdkDir, "package-lock.json"))
	require.NotEmpty(t, tested)
	require.Equal(t, tested, version(filepath.Join("..", "examples", "ai-sdk-chat", "package-lock.json")))
}

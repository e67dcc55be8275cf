package activities

// TEMPORARY: replaced by the sandbox helper's activities at merge.

import (
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/protocol"
)

const (
	SandboxBashActivity  = "SandboxBash"
	ApplySandboxActivity = "ApplySandbox"
)

type SandboxApplyInput struct {
	Call   protocol.ToolCall `json:"call"`
	Run    protocol.SandboxRun `json:"run"`
	Ledger []audit.Record     `json:"ledger,omitempty"`
}

func BashSandbox() error { return nil }

package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tollgate/tollgate/protocol"
)

// freeze freezes the gate (POST /admin/freeze) and says what it did.
func freeze(ctx context.Context, c *apiClient, req protocol.FreezeRequest, out io.Writer) error {
	var f protocol.GateFreeze
	if err := c.postJSON(ctx, "/admin/freeze", req, &f); err != nil {
		return err
	}
	fmt.Fprintln(out, freezeSays(f))
	return nil
}

// thaw thaws the gate (POST /admin/thaw) and says what it did.
func thaw(ctx context.Context, c *apiClient, req protocol.ThawRequest, out io.Writer) error {
	var f protocol.GateFreeze
	if err := c.postJSON(ctx, "/admin/thaw", req, &f); err != nil {
		return err
	}
	fmt.Fprintln(out, freezeSays(f))
	return nil
}

// freezeSays says in words what f says of the gate.
func freezeSays(f protocol.GateFreeze) string {
	var b strings.Builder
	if !f.Frozen {
		fmt.Fprintf(&b, "The gate is thawed (by %s at %s): grants, sandbox: auto and bypassApproval answer calls again.", f.By, f.At.UTC().Format(time.RFC3339))
		return b.String()
	}
	fmt.Fprintf(&b, "The gate is frozen (by %s at %s", f.By, f.At.UTC().Format(time.RFC3339))
	if f.Reason != "" {
		fmt.Fprintf(&b, ": %s", f.Reason)
	}
	b.WriteString("): every protected call asks a person")
	if f.BlockNewTurns {
		b.WriteString(", and no new message starts a turn")
	}
	b.WriteString(". Thaw it with: tollgate thaw")
	return b.String()
}

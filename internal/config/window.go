package config

import (
	"strings"

	"github.com/tollgate/tollgate/protocol"
)

// contextWindows are the context windows, in tokens, of well-known models,
// by the start of their names (the longest that matches wins), as their
// makers state them.
var contextWindows = []struct {
	prefix string
	tokens int
}{
	{"gpt-5", 400000},
	{"gpt-4.1", 1047576},
	{"gpt-4o", 128000},
	{"gpt-4-turbo", 128000},
	{"gpt-4-32k", 32768},
	{"gpt-4", 8192},
	{"gpt-3.5-turbo", 16385},
	{"o1-mini", 128000},
	{"o1", 200000},
	{"o3", 200000},
	{"o4-mini", 200000},
	{"claude", 200000},
	{"gemini-1.5", 1048576},
	{"gemini-2", 1048576},
	{"llama3.1", 131072},
	{"llama3.2", 131072},
	{"llama3.3", 131072},
	{"llama-3.1", 131072},
	{"llama-3.2", 131072},
	{"llama-3.3", 131072},
	{"qwen2.5", 32768},
	{"qwen3", 40960},
	{"mistral-large", 131072},
	{"mistral-small", 32768},
	{"deepseek", 65536},
}

// ContextWindowOf is the context window in tokens of the named model where
// it is well known (a provider's prefix, "openai/gpt-4o", is looked
// through), and protocol.DefaultContextWindow otherwise.
func ContextWindowOf(model string) int {
	name := strings.ToLower(model)
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	best, tokens := 0, protocol.DefaultContextWindow
	for _, w := range contextWindows {
		if strings.HasPrefix(name, w.prefix) && len(w.prefix) > best {
			best, tokens = len(w.prefix), w.tokens
		}
	}
	return tokens
}

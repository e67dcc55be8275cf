package activities

import "encoding/json"

// property is one argument in a tool's JSON schema.
type property struct {
	Type        string `json:"type"`
	Description string `json:"description"`
	Minimum     int    `json:"minimum,omitempty"`
}

// objectSchema is the JSON schema of a tool's arguments.
func objectSchema(required []string, props map[string]property) json.RawMessage {
	b, err := json.Marshal(struct {
		Type                 string              `json:"type"`
		Properties           map[string]property `json:"properties"`
		Required             []string            `json:"required"`
		AdditionalProperties bool                `json:"additionalProperties"`
	}{"object", props, required, false})
	if err != nil {
		panic(err) // cannot happen: the types above always marshal
	}
	return b
}

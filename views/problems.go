package views

// Problem is an error as the client sees it: a status, a machine-readable
// reason, a sentence, and sometimes a hint on how to fix it. The handlers
// make it from an error; views only shows it.
type Problem struct {
	Status  int    `json:"-"`
	Message string `json:"error"`
	Reason  string `json:"reason"`
	Hint    string `json:"hint,omitempty"`
	// Paths are the paths the problem is about (stale_base's), shown in
	// the page and sent in JSON.
	Paths []string `json:"paths,omitempty"`
}

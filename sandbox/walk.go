package sandbox

// EntryKind says what a walked entry is.
type EntryKind uint8

const (
	KindOther    EntryKind = iota // a device, pipe or socket
	KindDir                       // a folder
	KindFile                      // a regular file
	KindLink                      // a symbolic link
	KindWhiteout                  // an overlay's mark of a deleted path (upper layers only)
)

// WalkOptions tune WalkTree.
type WalkOptions struct {
	// MaxDepth bounds how deep the walk goes: entries down to that depth
	// are visited, and a folder at it is visited with TooDeep set and not
	// entered. A walk holds at most MaxDepth+1 descriptors.
	MaxDepth int
	// Upper: the tree is an overlay's upper layer, whose character
	// devices 0:0 are whiteouts and whose folders may be opaque.
	Upper bool
}

// TreeEntry is one entry met by WalkTree. Its methods work only during
// the visit: they act through the descriptor of the folder holding it.
type TreeEntry struct {
	Path    string // slash-separated, relative to the walked folder
	Name    string
	Kind    EntryKind
	Depth   int  // 1 for the walked folder's own entries
	Opaque  bool // an upper layer's folder that hides the lower one's
	TooDeep bool // a folder at MaxDepth: the walk does not enter it
	parent  int
}

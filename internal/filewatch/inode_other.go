//go:build !unix

package filewatch

import "io/fs"

func inode(fs.FileInfo) uint64 { return 0 }

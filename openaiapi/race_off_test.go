//go:build !race

package openaiapi

const raceBuild = false

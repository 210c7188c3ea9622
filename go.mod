module github.com/tide-project/tide

go 1.26.8

timeout: failed to run command ‘streambhmm’: No such file or directory

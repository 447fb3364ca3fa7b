package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"s3://bucket/p", "s3://bucket/p"},
		{"s3://AKID:SECRET@bucket/p", "s3://AKID:xxxxx@bucket/p"},
		{"postgres://u:p%40ss@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"s3://AKID:SECRET@bucket/%zz", "s3://xxxxx@bucket/%zz"},
		{"http://u:pw@h:1/%zz", "http://xxxxx@h:1/%zz"},
		{"not a url", "not a url"},
		// A password with an unescaped '?', '#' or '/' parses as a port and
		// a query, fragment or path: no user information to redact, and the
		// password was printed as it was.
		{"postgres://thaw:1234?SECRET@db:5432/lake", "postgres://xxxxx@db:5432/lake"},
		{"postgres://thaw:1234#SECRET@db:5432/lake", "postgres://xxxxx@db:5432/lake"},
		{"postgres://thaw:12/SECRET@db:5432/lake", "postgres://xxxxx@db:5432/lake"},
		{"thaw:SECRET@db:5432", "xxxxx@db:5432"}, // no "://": parsed as scheme "thaw"
		{"user@host", "user@host"},
		{"s3://bucket/a@b", "s3://bucket/a@b"},
		{"file:///tmp/a@b", "file:///tmp/a@b"},
		{"postgres://u@db/x", "postgres://u@db/x"},
		{"postgres://u:p@q/SECRET@db", "postgres://xxxxx@db"}, // password "p@q/SECRET"
		{"postgres://u:p@ss@db/x", "postgres://xxxxx@db/x"},
		{"postgres://me@corp.com:12/SECRET@db:5432/x", "postgres://xxxxx@db:5432/x"}, // user "me@corp.com", password "12/SECRET"
		{"postgres://me@corp.com:12?SECRET@db:5432/x", "postgres://xxxxx@db:5432/x"},
		{"postgres://me@corp.com@db/x", "postgres://me@corp.com@db/x"}, // no password
		// Credentials in the query: libpq's password parameter, a presigned
		// URL's signature, an endpoint URL with a password.
		{"postgres://thaw@db:5432/lake?sslmode=disable&password=SECRET-q", "postgres://thaw@db:5432/lake?sslmode=disable&password=xxxxx"},
		{"postgres://thaw@db/lake?PassWord=SECRET#frag", "postgres://thaw@db/lake?PassWord=xxxxx#frag"},
		{"https://s3/b/k?X-Amz-Credential=AKID%2FSECRET&X-Amz-Signature=SECRET&X-Amz-Expires=60", "https://s3/b/k?X-Amz-Credential=xxxxx&X-Amz-Signature=xxxxx&X-Amz-Expires=60"},
		{"s3://b?endpoint=https%3A%2F%2Fu%3ASECRET%40h&region=x", "s3://b?endpoint=xxxxx&region=x"},
		{"https://h/x?sig=SECRET&pass=SECRET&sslpassword=SECRET&access_token=SECRET", "https://h/x?sig=xxxxx&pass=xxxxx&sslpassword=xxxxx&access_token=xxxxx"},
		{"s3://b/p?region=us-east-1&endpoint=http%3A%2F%2Fh%3A9000", "s3://b/p?region=us-east-1&endpoint=http%3A%2F%2Fh%3A9000"},
		{"postgres://u:SECRET@db/x?password=SECRET", "postgres://u:xxxxx@db/x?password=xxxxx"},
		// A URL with a password in a query value is not raw's own user
		// information: raw's host and path stay.
		{"s3://bucket/p?endpoint=http://user:SECRET@minio:9000&x=1", "s3://bucket/p?endpoint=xxxxx&x=1"},
		{"https://catalog.example/v1?proxy=http://u:SECRET@proxy:3128", "https://catalog.example/v1?proxy=xxxxx"},
		{"https://h/p?api_key=SECRET&apiKey=SECRET&sslpassphrase=SECRET&keys=k1", "https://h/p?api_key=xxxxx&apiKey=xxxxx&sslpassphrase=xxxxx&keys=k1"},
		// A key (a GCS API key), an access key, an auth value, and a URL
		// whose own query carries a secret.
		{"https://storage.example/b/o?key=SECRET&access_key=SECRET&AccessKey=SECRET&auth=SECRET&region=us", "https://storage.example/b/o?key=xxxxx&access_key=xxxxx&AccessKey=xxxxx&auth=xxxxx&region=us"},
		{"s3://bucket/p?endpoint=https%3A%2F%2Fminio%3A9000%3Fsecret_key%3DSECRET&x=1", "s3://bucket/p?endpoint=xxxxx&x=1"},
		{"s3://bucket/p?endpoint=https%3A%2F%2Fminio%3A9000%3Fregion%3Dus", "s3://bucket/p?endpoint=https%3A%2F%2Fminio%3A9000%3Fregion%3Dus"},
		// A fragment of parameters (an OAuth redirect's) is redacted as a
		// query is (it was left as written); other fragments stay.
		{"https://app.example/cb#access_token=SECRET&state=x", "https://app.example/cb#access_token=xxxxx&state=x"},
		{"https://h/p?x=1#token=SECRET", "https://h/p?x=1#token=xxxxx"},
		{"https://h/p?password=SECRET#id_token=SECRET&x=1", "https://h/p?password=xxxxx#id_token=xxxxx&x=1"},
		{"https://h/doc#section-2", "https://h/doc#section-2"},
		{"https://h/doc?a=1#b=2", "https://h/doc?a=1#b=2"},
	} {
		got := URL(c.in)
		if got != c.want || strings.Contains(got, "SECRET") || strings.Contains(got, "pw@") {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
